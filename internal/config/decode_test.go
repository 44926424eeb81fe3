package config

import (
	"fmt"
	"strings"
	"testing"
)

type callerSpec struct {
	Token  string   `yaml:"token"`
	Scopes []string `yaml:"scopes"`
}

func callerDoc(i int) string {
	return fmt.Sprintf("apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: c%d}\nspec:\n  token: t%d\n  scopes: [call]\n", i, i)
}

// decodeAll decodes every resource, as a program reads them.
func decodeAll(t *testing.T, rs []*Resource) {
	for _, r := range rs {
		var s callerSpec
		if err := r.Decode(&s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDecodeManyDocumentsLinear: decoding the resources of one file of n
// documents costs about what decoding n files of one does. Decode read the
// file from the top for every resource, skipping the documents before
// its own: 1000 Callers in one file took 12.5 s, in 1000 files 0.28 s.
// The work is counted in allocations, not time.
func TestDecodeManyDocumentsLinear(t *testing.T) {
	const n = 300
	var docs []string
	var apart [][]*Resource
	for i := range n {
		docs = append(docs, callerDoc(i))
		rs, err := Parse(fmt.Sprintf("c%d.yaml", i), []byte(callerDoc(i)))
		if err != nil {
			t.Fatal(err)
		}
		apart = append(apart, rs)
	}
	one, err := Parse("all.yaml", []byte(strings.Join(docs, "---\n")))
	if err != nil || len(one) != n {
		t.Fatalf("Parse: %d resources, %v", len(one), err)
	}
	oneFile := testing.AllocsPerRun(1, func() { decodeAll(t, one) })
	manyFiles := testing.AllocsPerRun(1, func() {
		for _, rs := range apart {
			decodeAll(t, rs)
		}
	})
	t.Logf("allocations decoding %d documents: %.0f from one file, %.0f from %d files", n, oneFile, manyFiles, n)
	if oneFile > 2*manyFiles {
		t.Errorf("decoding %d documents of one file: %.0f allocations; of %d files: %.0f", n, oneFile, n, manyFiles)
	}
}

// TestDecodeAnyOrder: resources decode to their own spec, with the file's
// line numbers, in any order, again, and after another failed.
func TestDecodeAnyOrder(t *testing.T) {
	var docs []string
	for i := range 5 {
		docs = append(docs, callerDoc(i))
	}
	docs[2] = strings.Replace(docs[2], "  scopes:", "  bogus: 1\n  scopes:", 1)
	rs, err := Parse("all.yaml", []byte(strings.Join(docs, "---\n")))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{4, 1, 2, 3, 3, 0, 2, 4} {
		var s callerSpec
		err := rs[i].Decode(&s)
		if i == 2 {
			// Document 2 starts on line 15; bogus is its sixth line.
			if err == nil || !strings.Contains(err.Error(), "line 20: field bogus not found") {
				t.Errorf("document 2: %v, want the unknown field at line 20", err)
			}
			continue
		}
		if err != nil || s.Token != fmt.Sprintf("t%d", i) {
			t.Errorf("document %d: %+v, %v", i, s, err)
		}
	}
}
