package sandbox

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// ChildCommand is the first argument with which the sandbox re-executes the
// toolsvc binary. The main program must hand the remaining arguments to
// RunChild when it sees it:
//
//	if len(os.Args) > 1 && os.Args[1] == sandbox.ChildCommand {
//		err := sandbox.RunChild(os.Args[2:], nil)
//		fmt.Fprintln(os.Stderr, "toolsvc:", err)
//		os.Exit(125)
//	}
const ChildCommand = "__sandbox-exec"

// childConfig is what the parent tells the child to apply before it
// executes the program.
type childConfig struct {
	// Path is the absolute path of the program.
	Path string `json:"path"`
	// Landlock says whether to build a Landlock domain; ABI is the
	// kernel's version as probed by the parent.
	Landlock bool `json:"landlock"`
	ABI      int  `json:"abi"`
	// Strict applies exactly the parent's ABI and fails on anything that
	// cannot be enforced (mode required); otherwise best effort.
	Strict bool `json:"strict"`
	// ReadOnly are extra readable paths, ReadWrite the writable ones, Exec
	// the files and directories that may be executed.
	ReadOnly  []string `json:"ro,omitempty"`
	ReadWrite []string `json:"rw,omitempty"`
	Exec      []string `json:"exec,omitempty"`
	Limits    Limits   `json:"limits"`
	// WorkFD, when not 0, is the descriptor of the opened workspace: the
	// child changes into it and grants the workspace rights to it.
	WorkFD int `json:"workFd,omitempty"`
	// Dir is the working directory to change to afterwards, if any.
	Dir string `json:"dir,omitempty"`
	// Entry, when set, names the Entry the child runs in place of
	// executing Path; NoPrivDrop skips the privilege drop (mode off).
	Entry      string `json:"entry,omitempty"`
	NoPrivDrop bool   `json:"noPrivDrop,omitempty"`
	// Launcher, for an entry, is the binary through which it starts
	// programs (see Programs).
	Launcher string `json:"launcher,omitempty"`
	// UnsetEnv names a variable of this process's environment that the
	// program must not get (see Programs.Start).
	UnsetEnv string `json:"unsetEnv,omitempty"`
	// programs, for an entry, are the limits of the programs it starts,
	// as confine works them out.
	programs Limits
	// Reaper makes this process the reaper of the call rather than the
	// program: unconfined, it starts Child with this configuration
	// (without Reaper), stays its parent, and kills whatever the program
	// left running when it ends (see runReaper). Grace is the time
	// between SIGTERM and SIGKILL when the call is stopped.
	Reaper bool          `json:"reaper,omitempty"`
	Child  string        `json:"child,omitempty"`
	Grace  time.Duration `json:"grace,omitempty"`
}

// Entry is Go code the sandbox child runs after confining itself, in
// place of executing a program: args are Spec.Args, and the return value
// is the child's exit status. The programs it runs must be started with
// programs (see Programs), which gives them the per-program limits, and
// with an environment of their own: the entry's has MALLOC_ARENA_MAX=1
// besides what Spec.Env says. The main program passes its entries to
// RunChild by name; nothing registers itself.
type Entry func(programs *Programs, args []string) int

// Entries maps entry names (Spec.Entry) to their code.
type Entries map[string]Entry

// reportPrefix starts a report (see Report) on the set-up pipe, telling
// it apart from a set-up failure.
const reportPrefix = "\x00report\x00"

// maxReportBytes bounds what an entry may report.
const maxReportBytes = 64 << 10

// workFD is the child's descriptor of the workspace (ExtraFiles[1]).
const workFD = 4

func (c *childConfig) encode() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func decodeChildConfig(s string) (*childConfig, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("sandbox child: bad configuration: %w", err)
	}
	var c childConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("sandbox child: bad configuration: %w", err)
	}
	if c.Path == "" && c.Entry == "" {
		return nil, errors.New("sandbox child: no program path")
	}
	return &c, nil
}

// RunChild is the child side of the sandbox: args are the arguments after
// ChildCommand ("<config> -- argv..."). It applies resource limits and the
// Landlock ruleset to its own process and then replaces itself with the
// program, so it returns only on failure; the caller should then exit
// with status 125. A failure is also reported to the parent on the
// set-up pipe, so the parent can tell it from the program's own exit.
//
// When the configuration names an entry, the child runs that entry of
// entries instead, confined the same way, and exits with its status.
//
// On Linux the confined child makes itself the OOM killer's first choice
// (oom_score_adj 1000), and the program and what it starts inherit that,
// so memory running out kills a call's processes before the service.
//
// The service starts the reaper first, with the same command: it starts
// the confined child, stays its parent until the program and everything
// the program started are gone, and exits with the program's status.
func RunChild(args []string, entries Entries) error {
	if len(args) < 3 || args[1] != "--" {
		return reportSetup(errors.New("sandbox child: usage: " + ChildCommand + " <config> -- program [args...]"))
	}
	cfg, err := decodeChildConfig(args[0])
	if err != nil {
		return reportSetup(err)
	}
	if cfg.Reaper {
		return reportSetup(runReaper(cfg, args[2:]))
	}
	var entry Entry
	if cfg.Entry != "" {
		if entry = entries[cfg.Entry]; entry == nil {
			return reportSetup(fmt.Errorf("sandbox child: unknown entry %q", cfg.Entry))
		}
	}
	if err := confine(cfg); err != nil {
		return reportSetup(err)
	}
	if entry != nil {
		os.Exit(entry(&Programs{launcher: cfg.Launcher, limits: cfg.programs}, args[2:]))
	}
	return reportSetup(execProgram(cfg, args[2:]))
}
