package text

import (
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// A regex_replace replacement that refers to a group the pattern does not
// have is refused: Go expands it to nothing. Before, "$1_at_$2" (Go reads
// $1_at_ as the group named "1_at_") turned "alice@example.com
// bob@example.org" into "example.com example.org", and sed's "\2 at \1"
// was put in as text.
func TestRegexReplaceRefusesMissingGroups(t *testing.T) {
	const emails = `"text":"alice@example.com bob@example.org","pattern":"(\\w+)@(\\w+)"`
	for _, c := range []struct {
		args string
		want []string // in the message or suggestion
	}{
		{`{"operation":"regex_replace",` + emails + `,"replacement":"$1_at_$2"}`,
			[]string{`$1_at_ (a group named "1_at_")`, "the pattern has $0 (the whole match) and $1, $2", "${1}_at_ instead of $1_at_"}},
		{`{"operation":"regex_replace",` + emails + `,"replacement":"$3 costs $5"}`,
			[]string{"refers to $3, $5, which the pattern does not have", "$$ for a literal $"}},
		{`{"operation":"regex_replace",` + emails + `,"replacement":"${host}"}`,
			[]string{`${host} (a group named "host")`}},
		{`{"operation":"regex_replace","text":"a@b","pattern":"(?P<user>\\w+)@","replacement":"$user_x"}`,
			[]string{"$1 (${user})", "${user}_x instead of $user_x"}},
		{`{"operation":"regex_replace","text":"ab","pattern":"ab","replacement":"<$1>"}`,
			[]string{"the pattern has no groups, only $0"}},
		{`{"operation":"regex_replace",` + emails + `,"replacement":"\\2 at \\1"}`,
			[]string{`replacement has \1, \2, which Go's regular expressions keep as text`, `Write ${1}, ${2} instead of \1, \2`, "(?:…)"}},
	} {
		res := run1(t, c.args)
		if res.Code() != registry.CodeInvalidArguments {
			t.Errorf("%s: got %s %+v; want E_INVALID_ARGUMENTS", c.args, res.Output, res.Error)
			continue
		}
		got := res.Error.Message + " | " + res.Error.Suggestion
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.args, got, w)
			}
		}
	}
}

// What Go reads as intended, and text that is no reference, still runs.
func TestRegexReplaceKeepsValidReplacements(t *testing.T) {
	const emails = `"text":"alice@example.com bob@example.org","pattern":"(\\w+)@(\\w+)"`
	for _, c := range []struct{ args, want string }{
		{`{"operation":"regex_replace",` + emails + `,"replacement":"${1}_at_$2"}`, `{"result":"alice_at_example.com bob_at_example.org"}`},
		{`{"operation":"regex_replace",` + emails + `,"replacement":"$2-$1 $0"}`, `{"result":"example-alice alice@example.com example-bob bob@example.org"}`},
		{`{"operation":"regex_replace","text":"a@b","pattern":"(?P<user>\\w+)@","replacement":"${user}_x "}`, `{"result":"a_x b"}`},
		// $$ is a $; a $ before no name, or an unclosed brace, is text.
		{`{"operation":"regex_replace","text":"ab","pattern":"(a)","replacement":"$$5 $ ${1 $"}`, `{"result":"$5 $ ${1 $b"}`},
		// \1 is text where the pattern has no group 1, or where the
		// replacement uses $ references.
		{`{"operation":"regex_replace","text":"ab","pattern":"(?:a)","replacement":"\\1"}`, `{"result":"\\1b"}`},
		{`{"operation":"regex_replace","text":"ab","pattern":"(a)","replacement":"$1\\1"}`, `{"result":"a\\1b"}`},
	} {
		res := run1(t, c.args)
		if res.Status != registry.StatusOK || string(res.Output) != c.want {
			t.Errorf("%s\n got %s %+v\nwant %s", c.args, res.Output, res.Error, c.want)
		}
	}
}
