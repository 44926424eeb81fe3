package main

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/worker"
)

// Config is every process setting; this is the only place the
// environment is read.
type Config struct {
	Addr string `env:"TOOLSVC_ADDR" envDefault:"127.0.0.1:8080" desc:"listen address; a non-loopback address needs credentials or TOOLSVC_AUTH=none"`
	// AdminAddr is a listener for probes and scrapers only, so that
	// clients holding every connection of TOOLSVC_ADDR cannot make a
	// liveness probe fail and the service restart.
	AdminAddr         string        `env:"TOOLSVC_ADMIN_ADDR" desc:"a second listen address that serves only /healthz, /readyz and /metrics, without credentials and outside TOOLSVC_MAX_CONNECTIONS (at most 64 connections of its own), for probes and scrapers; empty: none"`
	ConfigPaths       []string      `env:"TOOLSVC_CONFIG" envSeparator:"," desc:"comma-separated YAML files or directories of resources"`
	Workspace         string        `env:"TOOLSVC_WORKSPACE" envDefault:"./workspace" desc:"the directory file and shell tools are confined to"`
	DefaultTimeout    time.Duration `env:"TOOLSVC_DEFAULT_TIMEOUT" envDefault:"30s" desc:"a tool's timeout when it declares none"`
	MaxTimeout        time.Duration `env:"TOOLSVC_MAX_TIMEOUT" envDefault:"5m" desc:"no call runs longer"`
	MaxOutputBytes    int           `env:"TOOLSVC_MAX_OUTPUT_BYTES" envDefault:"16384" desc:"a tool's output limit when it declares none"`
	ErrorMessageLimit int           `env:"TOOLSVC_ERROR_MESSAGE_LIMIT" envDefault:"1000" desc:"characters of an error message"`
	MaxRequestBytes   int64         `env:"TOOLSVC_MAX_REQUEST_BYTES" envDefault:"1048576" desc:"request body limit (413 beyond)"`
	MaxJSONDepth      int           `env:"TOOLSVC_MAX_JSON_DEPTH" envDefault:"64" desc:"request nesting limit (400 beyond)"`
	// MaxRequestBytesInFlight bounds the bytes of the calls' request
	// bodies held at once, so that many large bodies arriving together
	// (or held by clients that never read their answers) cannot take the
	// process's memory; 0 is derived (see defaultRequestBytesInFlight in internal/http).
	MaxRequestBytesInFlight ByteSize `env:"TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT" envDefault:"0" desc:"bytes of request bodies of calls held at once, from before they are read until their requests end (32MiB, 1GiB or bytes; a request beyond is answered 429 overloaded, unread); 0 is 32 times TOOLSVC_MAX_REQUEST_BYTES, and at most a sixteenth of GOMEMLIMIT when that is set"`
	// MaxConnections bounds the client connections held open at once, so
	// that idle ones cannot take the file descriptors the store and the
	// tools need; a connection beyond it waits in the listen queue.
	MaxConnections int `env:"TOOLSVC_MAX_CONNECTIONS" envDefault:"0" desc:"client connections open at once (more wait to be accepted, and one idle the longest between requests is closed to make room); 0 is half the process's open-file limit"`
	// MaxHeaderBytes bounds a request's line and headers, which are read
	// before any credential is checked: with net/http's default of 1 MiB,
	// 300 connections each sending a header that never ended held 480 MB.
	MaxHeaderBytes ByteSize `env:"TOOLSVC_MAX_HEADER_BYTES" envDefault:"64KiB" desc:"most bytes of a request's line and headers (431 beyond), on TOOLSVC_ADDR and TOOLSVC_ADMIN_ADDR; between 4KiB and 1MiB"`
	// MaxConcurrency bounds the calls running at once (429 beyond it);
	// 0 (the default) is 64 per CPU the Go runtime uses.
	MaxConcurrency     int `env:"TOOLSVC_MAX_CONCURRENCY" envDefault:"0" desc:"calls running at once (429 beyond); 0 is 64 per CPU the Go runtime uses (GOMAXPROCS: a container's CPU limit where one is set)"`
	MaxToolConcurrency int `env:"TOOLSVC_MAX_TOOL_CONCURRENCY" desc:"calls of one tool running at once, for tools that set no maxConcurrency of their own (429 beyond; empty or 0: only the service-wide limit)"`
	// ProcessConcurrency bounds the calls of each process-backed tool
	// (shell__exec, exec tools) running at once; 0 (the default) is 4 per
	// CPU. A tool's own maxConcurrency wins.
	ProcessConcurrency int `env:"TOOLSVC_PROCESS_TOOL_CONCURRENCY" envDefault:"0" desc:"calls of each process-backed tool (shell__exec, exec tools) running at once; 0 is 4 per CPU the Go runtime uses; a tool's own maxConcurrency wins (429 beyond)"`
	// ToolMemoryLimit is the kernel-enforced memory ceiling of what
	// evaluates a model-supplied program: the shell interpreter's process
	// (and the programs it starts) and the worker processes that run
	// json__query, text__transform and data__parse. A call that needs more
	// fails with E_TOOL naming this setting; the service keeps answering.
	ToolMemoryLimit ByteSize `env:"TOOLSVC_TOOL_MEMORY_LIMIT" envDefault:"512MiB" desc:"kernel-enforced memory ceiling (512MiB, 1GiB or bytes) of the shell interpreter and its programs and of the workers that run json__query, text__transform and data__parse; a call over it is E_TOOL"`
	// ToolWorkers is how many worker processes may run json__query,
	// text__transform and data__parse calls at once; 0 is 2 per CPU.
	ToolWorkers     int           `env:"TOOLSVC_TOOL_WORKERS" envDefault:"0" desc:"worker processes that run json__query, text__transform and data__parse calls at once (further calls wait for one within their timeout); 0 is 2 per CPU"`
	ShutdownTimeout time.Duration `env:"TOOLSVC_SHUTDOWN_TIMEOUT" envDefault:"30s" desc:"on SIGTERM, how long calls in flight may finish before they are cancelled"`
	LogLevel        string        `env:"TOOLSVC_LOG_LEVEL" envDefault:"info" desc:"debug, info, warn, error"`
	LogFormat       string        `env:"TOOLSVC_LOG_FORMAT" envDefault:"json" desc:"json or text"`
	// LogFlushInterval is how long log lines may wait in memory, so that
	// many are written with one system call.
	LogFlushInterval   time.Duration `env:"TOOLSVC_LOG_FLUSH_INTERVAL" envDefault:"100ms" desc:"how long log lines may wait in memory before they are written out together (also when 64 KiB are held, and at shutdown); 0 writes each line at once"`
	DataDir            string        `env:"TOOLSVC_DATA_DIR" envDefault:"./data" desc:"where the embedded store keeps toolsvc.db"`
	StoreURL           string        `env:"TOOLSVC_STORE_URL" desc:"postgres://…: keep state in PostgreSQL instead, shared by replicas; the URL may set pool_max_conns (connections per replica; default the larger of 4 and the CPUs) and connect_timeout (seconds a new connection may take to open; default TOOLSVC_STORE_TIMEOUT)"`
	StoreSchema        string        `env:"TOOLSVC_STORE_SCHEMA" desc:"PostgreSQL schema to use (created if missing)"`
	InstanceID         string        `env:"TOOLSVC_INSTANCE_ID" desc:"this replica's name as owner of running calls; set only to a name no two live replicas share"`
	Retention          time.Duration `env:"TOOLSVC_RETENTION" envDefault:"24h" desc:"how long results, decided approvals and audit entries are kept"`
	ApprovalTTL        time.Duration `env:"TOOLSVC_APPROVAL_TTL" envDefault:"15m" desc:"how long an approval request waits"`
	ApprovalMaxPending int           `env:"TOOLSVC_APPROVAL_MAX_PENDING" envDefault:"100" desc:"approval requests one caller may have waiting at once; a call that would file one more is E_POLICY_DENIED (0: no bound)"`
	// StoreTimeout bounds every store operation (503 beyond).
	StoreTimeout time.Duration `env:"TOOLSVC_STORE_TIMEOUT" envDefault:"5s" desc:"deadline of every store operation (503 beyond)"`
	// StoreWaitTimeout bounds how long a retry waits for the first call
	// with its toolCallId to finish (then 202 with status running).
	StoreWaitTimeout time.Duration `env:"TOOLSVC_STORE_WAIT_TIMEOUT" envDefault:"60s" desc:"how long a retry waits for the first call with its toolCallId to finish (then 202 with status running)"`
	// StoreStartTimeout bounds opening the store at start, retries included.
	StoreStartTimeout time.Duration `env:"TOOLSVC_STORE_START_TIMEOUT" envDefault:"60s" desc:"how long start-up tries to open the store, retries included, before it gives up"`
	// StoreBacklog bounds the results and audit entries held in memory
	// while the store does not take them.
	StoreBacklog int `env:"TOOLSVC_STORE_BACKLOG" envDefault:"1000" desc:"results and audit entries held in memory and retried while the store does not take them"`
	// StoreSync is the embedded store's SQLite synchronous mode: full
	// (every commit reaches the disk before it is answered) or normal
	// (commits survive a crash of the process, not of the machine).
	StoreSync string `env:"TOOLSVC_STORE_SYNC" envDefault:"full" desc:"embedded store: full (every answered record is on disk) or normal (faster; survives a crash of toolsvc but the last answered records can be lost if the machine loses power or the kernel crashes)"`
	// StoreCommitWindow is how long the store's group commit waits for
	// more writes to share a transaction; 0 takes only what is already
	// waiting.
	StoreCommitWindow time.Duration `env:"TOOLSVC_STORE_COMMIT_WINDOW" envDefault:"0s" desc:"how long a group commit waits for more calls' writes to share its transaction and fsync (adds up to this much latency to each write; 0 batches only what is already waiting)"`
	// StoreCommitMax bounds the calls' writes one group commit holds; 0
	// is the store's own default (see storeCommitMax).
	StoreCommitMax int `env:"TOOLSVC_STORE_COMMIT_MAX" envDefault:"0" desc:"most calls' writes one group commit holds; 1 commits each write alone (no grouping); 0 is 128"`

	// SpillMaxBytes is the most of one cut output (or process stream) kept
	// in the store for result__read and GET /calls/{id}/output; 0 keeps
	// none. SpillRetention is how long it is kept.
	SpillMaxBytes  int64         `env:"TOOLSVC_SPILL_MAX_BYTES" envDefault:"67108864" desc:"most bytes of one cut output stream kept for reading on (result__read, GET /calls/{id}/output); 0 keeps none"`
	SpillRetention time.Duration `env:"TOOLSVC_SPILL_RETENTION" envDefault:"1h" desc:"how long kept outputs can be read"`
	// SpillTotalBytes bounds the kept outputs of all calls together, so
	// that callers cutting output in a loop cannot fill the store's disk.
	SpillTotalBytes int64 `env:"TOOLSVC_SPILL_TOTAL_BYTES" envDefault:"1073741824" desc:"most bytes of cut outputs kept in all (a stream started when they are reached keeps none until some expire); 0 is no bound"`
	// OutputHeadPercent is the share of a process stream's limit that keeps
	// its beginning (1-100); the rest keeps its end.
	OutputHeadPercent int `env:"TOOLSVC_OUTPUT_HEAD_PERCENT" envDefault:"50" desc:"share of a cut process stream kept from its beginning; the rest is kept from its end"`

	APIKey          string `env:"TOOLSVC_API_KEY" desc:"one bearer token with every scope (surrounding whitespace, such as a key file's final newline, is dropped)"`
	PolicyCostLimit uint64 `env:"TOOLSVC_POLICY_COST_LIMIT" envDefault:"1000000" desc:"CEL evaluation cost limit of one rule condition (over it, the call is denied); the conditions of one call together may cost four times this"`

	// Auth "none" allows serving a non-loopback address without credentials.
	Auth string `env:"TOOLSVC_AUTH" desc:"none allows a non-loopback address without credentials (logged as a warning)"`
	// Watch reloads the configuration when its files change (SIGHUP
	// always does).
	Watch             bool          `env:"TOOLSVC_WATCH" envDefault:"false" desc:"true reloads the configuration when its *.yaml and *.yml files (or the files TOOLSVC_CONFIG names) change, once two reads of them agree; other files, such as a header's valueFrom.file, need SIGHUP, which always reloads"`
	MCPConnectTimeout time.Duration `env:"TOOLSVC_MCP_CONNECT_TIMEOUT" envDefault:"10s" desc:"how long one connection attempt to an MCP server may take; start-up and reloads wait this long for new servers"`

	// PublicURL is the service's address as people reach it
	// ("https://toolsvc.example.com"); notifications link to the console
	// below it. Empty: made of TOOLSVC_ADDR (see publicURL).
	PublicURL string `env:"TOOLSVC_PUBLIC_URL" desc:"the service's address as people reach it; notifications link to the console below it (empty: https:// with TOOLSVC_TLS_CERT_FILE, else http://, and TOOLSVC_ADDR, localhost for an address without a host; logged as a warning when such a link opens only where the service runs)"`
	// UI serves the console at /ui.
	UI bool `env:"TOOLSVC_UI" envDefault:"true" desc:"serve the approval console at /ui"`
	// UISessionKey seals console session cookies: 32 bytes as 64 hex
	// digits. Empty: a random key per process (sign-ins end with it and do
	// not cross replicas).
	UISessionKey string `env:"TOOLSVC_UI_SESSION_KEY" desc:"64 hex digits that seal console session cookies; empty: a random key per process"`
	// UISessionTTL is how long a console sign-in lasts.
	UISessionTTL time.Duration `env:"TOOLSVC_UI_SESSION_TTL" envDefault:"12h" desc:"how long a console sign-in lasts"`

	// TLS serves HTTPS with this certificate and key (PEM), read again on
	// SIGHUP and when the files change. With TLSClientCAFile, client
	// certificates signed by these CAs are verified and map to Caller
	// resources by subject or SAN (a client without one still may use a
	// bearer token).
	TLSCertFile     string `env:"TOOLSVC_TLS_CERT_FILE" desc:"PEM certificate: serve HTTPS (read again on SIGHUP and when the file changes)"`
	TLSKeyFile      string `env:"TOOLSVC_TLS_KEY_FILE" desc:"PEM key of TOOLSVC_TLS_CERT_FILE"`
	TLSClientCAFile string `env:"TOOLSVC_TLS_CLIENT_CA_FILE" desc:"PEM CAs whose client certificates map to Caller resources by subject or SAN"`

	// RateLimit is the default calls per second of a caller whose Caller
	// or Issuer rule sets none (0: no default limit); RateLimitBurst its
	// burst (0: max(1, rate)).
	RateLimit      float64 `env:"TOOLSVC_RATE_LIMIT" envDefault:"0" desc:"default calls per second of a caller whose Caller or Issuer rule sets none, and of the anonymous caller without credentials (0: no default limit)"`
	RateLimitBurst int     `env:"TOOLSVC_RATE_LIMIT_BURST" envDefault:"0" desc:"burst of TOOLSVC_RATE_LIMIT (0: max(1, rate))"`
	// RateLimitRedisURL shares the limits of every replica through Redis
	// (redis://host:6379/0); empty keeps them per instance.
	RateLimitRedisURL    string `env:"TOOLSVC_RATE_LIMIT_REDIS_URL" desc:"redis://host:6379/0 shares the rate limits of every replica; empty keeps them per instance"`
	RateLimitRedisPrefix string `env:"TOOLSVC_RATE_LIMIT_REDIS_PREFIX" envDefault:"toolsvc:" desc:"prefix of the rate-limit keys in Redis"`
	// RateLimitFailure is what a Redis outage does: open (limits hold per
	// instance; /readyz stays ready) or closed (calls are refused with 503;
	// /readyz is not ready).
	RateLimitFailure string `env:"TOOLSVC_RATE_LIMIT_FAILURE" envDefault:"open" desc:"what a Redis outage does: open (limits hold per instance) or closed (calls get 503, /readyz is not ready)"`
	// probe replaces the sandbox's kernel probe (tests).
	probe func() sandbox.ProbeResult

	// environ is the whole environment, for the variables resources name
	// (exec tools' env allowlists, valueFrom.env); asked records the
	// names they asked for, which are not unknown settings.
	environ map[string]string
	asked   *askedNames

	// WorkspaceReserve is the free space of the workspace's file system
	// that the file tools leave alone (for the store, when they share it).
	WorkspaceReserve ByteSize `env:"TOOLSVC_WORKSPACE_RESERVE" envDefault:"64MiB" desc:"free space of the workspace's file system that fs__write, fs__edit and new instance directories leave alone (E_TOOL beyond); 0 keeps none; on a file system smaller than twice it, a tenth of its size"`

	FSMaxReadBytes    int64 `env:"TOOLSVC_FS_MAX_READ_BYTES" envDefault:"1048576" desc:"most bytes one fs__read returns"`
	FSMaxWriteBytes   int64 `env:"TOOLSVC_FS_MAX_WRITE_BYTES" envDefault:"4194304" desc:"largest file fs__write/fs__edit writes"`
	FSMaxSearchBytes  int64 `env:"TOOLSVC_FS_MAX_SEARCH_BYTES" envDefault:"33554432" desc:"most content one fs__search scans"`
	DataMaxInputBytes int   `env:"TOOLSVC_DATA_MAX_INPUT_BYTES" envDefault:"1048576" desc:"largest data__parse input"`
	DataMaxRows       int   `env:"TOOLSVC_DATA_MAX_ROWS" envDefault:"10000" desc:"most rows data__parse returns"`

	// ShellSandbox is required (the default; without Landlock, shell and
	// exec tools are not served and /readyz says why), best-effort (run
	// them with whatever the kernel offers) or off.
	ShellSandbox string `env:"TOOLSVC_SHELL_SANDBOX" envDefault:"required" desc:"required (without Landlock, shell__exec and exec tools are not served and /readyz says why), best-effort (run them with what the kernel offers) or off (process group and scrubbed environment only); also for exec tools, as are the TOOLSVC_SHELL_RLIMIT_* limits and TOOLSVC_SHELL_READ_ONLY_DIRS"`
	// SandboxLauncher is the toolsvc-sandbox binary that confines each
	// program of an exec tool; empty looks for it next to toolsvc, and
	// without it toolsvc re-executes itself (slower).
	SandboxLauncher     string        `env:"TOOLSVC_SANDBOX_LAUNCHER" desc:"the toolsvc-sandbox binary that confines exec tools' programs; empty looks next to toolsvc, else toolsvc re-executes itself (slower)"`
	ShellAllow          []string      `env:"TOOLSVC_SHELL_ALLOW" envSeparator:"," desc:"comma-separated program names shell__exec may run; the default has no shells, interpreters, env, xargs, find, sed, awk or network clients"`
	ShellEnvAllow       []string      `env:"TOOLSVC_SHELL_ENV_ALLOW" envSeparator:"," desc:"environment variable names a call may set for its programs"`
	ShellReadOnlyDirs   []string      `env:"TOOLSVC_SHELL_READ_ONLY_DIRS" envSeparator:"," desc:"extra paths programs may read"`
	ShellCPUSeconds     uint64        `env:"TOOLSVC_SHELL_RLIMIT_CPU_SECONDS" envDefault:"60" desc:"CPU seconds per program"`
	ShellAddressSpace   uint64        `env:"TOOLSVC_SHELL_RLIMIT_AS_BYTES" envDefault:"2147483648" desc:"address space per program"`
	ShellFileSize       uint64        `env:"TOOLSVC_SHELL_RLIMIT_FSIZE_BYTES" envDefault:"1073741824" desc:"largest file a program writes"`
	ShellProcesses      uint64        `env:"TOOLSVC_SHELL_RLIMIT_NPROC" desc:"process limit (counted per user by the kernel; unset by default)"`
	ShellMaxOutputBytes int           `env:"TOOLSVC_SHELL_MAX_OUTPUT_BYTES" envDefault:"8192" desc:"captured bytes of each of stdout and stderr"`
	ShellMaxProcesses   int           `env:"TOOLSVC_SHELL_MAX_PROCESSES" envDefault:"32" desc:"programs one call runs at once"`
	ShellTimeout        time.Duration `env:"TOOLSVC_SHELL_TIMEOUT" envDefault:"30s" desc:"shell__exec's timeout"`

	HTTPAllowCIDRs      []netip.Prefix `env:"TOOLSVC_HTTP_ALLOW_CIDRS" envSeparator:"," desc:"comma-separated CIDRs the HTTP tools may reach although they are internal (e.g. 10.1.2.3/32); metadata addresses only by an exact /32 or /128"`
	HTTPAllowHosts      []string       `env:"TOOLSVC_HTTP_ALLOW_HOSTS" envSeparator:"," desc:"when set, the only hosts the HTTP tools may fetch (api.example.com, *.example.org); it never opens an internal address"`
	HTTPDenyHosts       []string       `env:"TOOLSVC_HTTP_DENY_HOSTS" envSeparator:"," desc:"hosts never fetched"`
	HTTPTimeout         time.Duration  `env:"TOOLSVC_HTTP_TIMEOUT" envDefault:"30s" desc:"HTTP tools' timeout"`
	HTTPMaxBytes        int64          `env:"TOOLSVC_HTTP_MAX_BYTES" envDefault:"5242880" desc:"largest response body a call may ask for (after decompression)"`
	HTTPDefaultBytes    int64          `env:"TOOLSVC_HTTP_DEFAULT_BYTES" envDefault:"1048576" desc:"response body limit when a call gives no maxBytes"`
	HTTPMaxRequestBytes int            `env:"TOOLSVC_HTTP_MAX_REQUEST_BYTES" envDefault:"1048576" desc:"largest http__post body"`

	BatchParallelism int  `env:"TOOLSVC_BATCH_PARALLELISM" envDefault:"10" desc:"read_only calls of one batch (or plan) that run at once (1–50)"`
	PlanTool         bool `env:"TOOLSVC_PLAN_TOOL" envDefault:"false" desc:"true serves plan__execute"`

	// TraceContent records tool arguments and outputs on spans.
	TraceContent bool `env:"TOOLSVC_TRACE_CONTENT" desc:"record tool arguments and outputs on spans (gen_ai.tool.call.arguments, gen_ai.tool.call.result, 8192 characters each); they may hold personal data or secrets"`
	// OpenTelemetry's standard variables; the OTLP exporter reads the rest
	// of its settings (OTEL_EXPORTER_OTLP_*) from the process environment.
	TracesExporter     string `env:"OTEL_TRACES_EXPORTER" desc:"otlp, console (JSON spans on stdout) or none"`
	OTLPEndpoint       string `env:"OTEL_EXPORTER_OTLP_ENDPOINT" desc:"where OTLP spans go (http://collector:4318); with OTEL_EXPORTER_OTLP_PROTOCOL, _HEADERS, _TIMEOUT, _CERTIFICATE … as the OpenTelemetry SDK reads them"`
	OTLPTracesEndpoint string `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" desc:"where OTLP spans go (http://collector:4318); with OTEL_EXPORTER_OTLP_PROTOCOL, _HEADERS, _TIMEOUT, _CERTIFICATE … as the OpenTelemetry SDK reads them"`
	TracesSampler      string `env:"OTEL_TRACES_SAMPLER" desc:"always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio, with the ratio as the argument"`
	TracesSamplerArg   string `env:"OTEL_TRACES_SAMPLER_ARG" desc:"always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio, with the ratio as the argument"`
	ServiceName        string `env:"OTEL_SERVICE_NAME" envDefault:"toolsvc" desc:"the service.name of spans; OTEL_RESOURCE_ATTRIBUTES adds resource attributes"`
	SDKDisabled        bool   `env:"OTEL_SDK_DISABLED" desc:"true turns tracing off"`
}

// loadConfig reads the configuration from environ ("KEY=value" pairs).
func loadConfig(environ []string) (Config, error) {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	var c Config
	if err := env.ParseWithOptions(&c, env.Options{Environment: vars}); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	c.environ = vars
	c.asked = &askedNames{names: map[string]bool{}}
	// A key read from a file (openssl rand -hex 32 > toolsvc.key, a
	// Kubernetes secret made --from-file) ends in a newline that no client
	// sends: kept, it locked every client out.
	c.APIKey = strings.TrimSpace(c.APIKey)
	return c, c.validate()
}

// negatives says, by variable, which numeric settings are below zero (or
// NaN): no size, count, duration or rate here means anything negative,
// and most would otherwise fall back to their default without a word.
func (c Config) negatives() map[string]string {
	errs := map[string]string{}
	v := reflect.ValueOf(c)
	for _, f := range reflect.VisibleFields(v.Type()) {
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if name == "" {
			continue
		}
		field := v.FieldByIndex(f.Index)
		switch field.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if field.Int() < 0 {
				errs[name] = fmt.Sprintf("%s must not be negative, got %s", name, c.environ[name])
			}
		case reflect.Float32, reflect.Float64:
			if !(field.Float() >= 0) {
				errs[name] = fmt.Sprintf("%s must be a number not below 0, got %s", name, c.environ[name])
			}
		}
	}
	return errs
}

// askedNames are the variables of the environment that resources asked
// for by name (lookupEnv).
type askedNames struct {
	mu    sync.Mutex
	names map[string]bool
}

func (a *askedNames) add(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.names[name] = true
}

func (a *askedNames) has(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.names[name]
}

// unknownSettings names the TOOLSVC_ variables of the environment that no
// setting reads, each with the setting it most likely meant: a misspelt
// limit would otherwise leave the default in force without a word.
// TOOLSVC_TEST_ variables are the tests' own, and variables the resources
// asked for (a notifier's secretFrom, an MCP server's env) theirs.
func (c Config) unknownSettings() []string {
	var known []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if name, _, _ := strings.Cut(f.Tag.Get("env"), ","); name != "" {
			known = append(known, name)
		}
	}
	var out []string
	for k := range c.environ {
		if !strings.HasPrefix(k, "TOOLSVC_") || strings.HasPrefix(k, "TOOLSVC_TEST_") || slices.Contains(known, k) || (c.asked != nil && c.asked.has(k)) {
			continue
		}
		best, dist := "", 4 // at most three edits
		for _, n := range known {
			if d := registry.EditDistance(k, n); d < dist {
				best, dist = n, d
			}
		}
		if best != "" {
			k += " (did you mean " + best + "?)"
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// lookupEnv reads one variable of the environment the configuration was
// loaded from.
func (c Config) lookupEnv(name string) (string, bool) {
	if c.asked != nil {
		c.asked.add(name)
	}
	v, ok := c.environ[name]
	return v, ok
}

// maxCallTimeout bounds TOOLSVC_MAX_TIMEOUT: no call runs for longer than
// a day.
const maxCallTimeout = 24 * time.Hour

func (c Config) validate() error {
	var errs []string
	if c.DefaultTimeout <= 0 || c.MaxTimeout <= 0 {
		errs = append(errs, "TOOLSVC_DEFAULT_TIMEOUT and TOOLSVC_MAX_TIMEOUT must be positive")
	}
	if raw, ok := c.environ["TOOLSVC_API_KEY"]; ok && raw != "" && c.APIKey == "" {
		errs = append(errs, "TOOLSVC_API_KEY is only whitespace; set it to the key (or unset it)")
	}
	if i := strings.IndexFunc(c.APIKey, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		errs = append(errs, fmt.Sprintf("TOOLSVC_API_KEY has a space or control character at byte %d; a bearer token has none, so no client could send it", i))
	}
	if c.MaxTimeout > maxCallTimeout {
		// The server's write timeout is MaxTimeout and a minute more: a
		// bound near a Duration's largest would wrap it to none.
		errs = append(errs, fmt.Sprintf("TOOLSVC_MAX_TIMEOUT must be at most %s, got %s", maxCallTimeout, c.MaxTimeout))
	}
	if c.DefaultTimeout > c.MaxTimeout {
		errs = append(errs, "TOOLSVC_DEFAULT_TIMEOUT must not exceed TOOLSVC_MAX_TIMEOUT")
	}
	if c.MaxOutputBytes < 256 {
		errs = append(errs, "TOOLSVC_MAX_OUTPUT_BYTES must be at least 256")
	}
	if c.ErrorMessageLimit < 50 {
		errs = append(errs, "TOOLSVC_ERROR_MESSAGE_LIMIT must be at least 50")
	}
	if c.MaxRequestBytes < 1024 {
		errs = append(errs, "TOOLSVC_MAX_REQUEST_BYTES must be at least 1024")
	}
	if n := c.MaxRequestBytesInFlight; n != 0 && (n < ByteSize(max(c.MaxRequestBytes, 0)) || n > math.MaxInt64) {
		errs = append(errs, fmt.Sprintf("TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT must be 0 (derived) or at least TOOLSVC_MAX_REQUEST_BYTES (%d), so that a body at the limit can be read; got %d", c.MaxRequestBytes, n))
	}
	if c.StoreTimeout <= 0 || c.StoreWaitTimeout <= 0 || c.StoreStartTimeout <= 0 {
		return fmt.Errorf("TOOLSVC_STORE_TIMEOUT, TOOLSVC_STORE_WAIT_TIMEOUT and TOOLSVC_STORE_START_TIMEOUT must be positive")
	}
	if c.StoreBacklog <= 0 {
		return fmt.Errorf("TOOLSVC_STORE_BACKLOG must be positive")
	}
	if c.StoreSync != "full" && c.StoreSync != "normal" {
		errs = append(errs, fmt.Sprintf("TOOLSVC_STORE_SYNC must be full or normal, got %q", c.StoreSync))
	}
	if c.StoreCommitWindow < 0 || c.StoreCommitWindow > time.Second {
		errs = append(errs, fmt.Sprintf("TOOLSVC_STORE_COMMIT_WINDOW must be between 0s and 1s, got %s", c.StoreCommitWindow))
	}
	if c.StoreCommitMax < 0 || c.StoreCommitMax > 10000 {
		errs = append(errs, fmt.Sprintf("TOOLSVC_STORE_COMMIT_MAX must be between 0 (the store's default) and 10000, got %d", c.StoreCommitMax))
	}
	if c.MaxHeaderBytes < minHeaderBytes || c.MaxHeaderBytes > maxHeaderBytes {
		errs = append(errs, fmt.Sprintf("TOOLSVC_MAX_HEADER_BYTES must be between 4KiB and 1MiB, got %d bytes", c.MaxHeaderBytes))
	}
	if c.AdminAddr != "" && samePort(c.Addr, c.AdminAddr) {
		errs = append(errs, fmt.Sprintf("TOOLSVC_ADMIN_ADDR (%s) and TOOLSVC_ADDR (%s) are the same port: the second listener could not bind it; give TOOLSVC_ADMIN_ADDR a port of its own", c.AdminAddr, c.Addr))
	}
	if c.MaxJSONDepth < 2 {
		errs = append(errs, "TOOLSVC_MAX_JSON_DEPTH must be at least 2")
	}
	if c.ToolWorkers < 0 {
		errs = append(errs, fmt.Sprintf("TOOLSVC_TOOL_WORKERS must be 0 (2 per CPU) or more, got %d", c.ToolWorkers))
	}
	if c.MaxConcurrency < 0 || c.MaxToolConcurrency < 0 || c.ProcessConcurrency < 0 {
		errs = append(errs, "TOOLSVC_MAX_CONCURRENCY, TOOLSVC_MAX_TOOL_CONCURRENCY and TOOLSVC_PROCESS_TOOL_CONCURRENCY must not be negative")
	}
	if c.ToolMemoryLimit < worker.MinMemoryLimit {
		errs = append(errs, fmt.Sprintf("TOOLSVC_TOOL_MEMORY_LIMIT must be at least %dMiB, got %d bytes", worker.MinMemoryLimit>>20, c.ToolMemoryLimit))
	}
	if c.BatchParallelism < 1 || c.BatchParallelism > 50 {
		errs = append(errs, "TOOLSVC_BATCH_PARALLELISM must be between 1 and 50")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err.Error())
	}
	if c.LogFlushInterval < 0 {
		errs = append(errs, fmt.Sprintf("TOOLSVC_LOG_FLUSH_INTERVAL must not be negative, got %s", c.LogFlushInterval))
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Sprintf("TOOLSVC_LOG_FORMAT must be json or text, got %q", c.LogFormat))
	}
	if c.MCPConnectTimeout <= 0 {
		errs = append(errs, "TOOLSVC_MCP_CONNECT_TIMEOUT must be positive")
	}
	if c.SpillMaxBytes < 0 || c.SpillRetention <= 0 {
		errs = append(errs, "TOOLSVC_SPILL_MAX_BYTES must not be negative and TOOLSVC_SPILL_RETENTION must be positive")
	}
	if c.OutputHeadPercent < 1 || c.OutputHeadPercent > 100 {
		errs = append(errs, "TOOLSVC_OUTPUT_HEAD_PERCENT must be between 1 and 100")
	}
	if c.Retention <= 0 || c.ApprovalTTL <= 0 {
		errs = append(errs, "TOOLSVC_RETENTION and TOOLSVC_APPROVAL_TTL must be positive")
	}
	if c.StoreURL != "" && !strings.HasPrefix(c.StoreURL, "postgres://") && !strings.HasPrefix(c.StoreURL, "postgresql://") {
		errs = append(errs, "TOOLSVC_STORE_URL must be a postgres:// URL (leave it empty for the embedded store under TOOLSVC_DATA_DIR)")
	}
	if err := c.tracing(nil).Validate(); err != nil && !c.SDKDisabled {
		errs = append(errs, err.Error())
	}
	if _, err := c.uiKey(); err != nil {
		errs = append(errs, err.Error())
	}
	if c.UISessionTTL <= 0 {
		errs = append(errs, "TOOLSVC_UI_SESSION_TTL must be positive")
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Sprintf("TOOLSVC_PUBLIC_URL must be an absolute http or https URL, got %q", c.PublicURL))
		}
	}
	if c.Auth != "" && c.Auth != "none" {
		errs = append(errs, fmt.Sprintf("TOOLSVC_AUTH must be empty or none, got %q", c.Auth))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, "TOOLSVC_TLS_CERT_FILE and TOOLSVC_TLS_KEY_FILE are set together")
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, "TOOLSVC_TLS_CLIENT_CA_FILE needs TOOLSVC_TLS_CERT_FILE and TOOLSVC_TLS_KEY_FILE")
	}
	if !(c.RateLimit >= 0) || math.IsInf(c.RateLimit, 1) || c.RateLimitBurst < 0 { // !(>= 0) refuses NaN too
		errs = append(errs, "TOOLSVC_RATE_LIMIT and TOOLSVC_RATE_LIMIT_BURST must be finite numbers, not negative")
	}
	if c.RateLimitFailure != "open" && c.RateLimitFailure != "closed" {
		errs = append(errs, fmt.Sprintf("TOOLSVC_RATE_LIMIT_FAILURE must be open or closed, got %q", c.RateLimitFailure))
	}
	// A setting below zero that a check above did not already name.
	negative := c.negatives()
	for _, name := range slices.Sorted(maps.Keys(negative)) {
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, name) }) {
			errs = append(errs, negative[name])
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// The bounds of TOOLSVC_MAX_HEADER_BYTES: a request's line and headers
// need a few KiB, a large JWT or a proxy's headers tens of KiB; net/http's
// own default, 1 MiB, is the most.
const (
	minHeaderBytes = 4 << 10
	maxHeaderBytes = 1 << 20
)

// samePort says whether listen addresses a and b ("host:port") would take
// the same port: the same port number (not 0, which the kernel picks) on
// the same host, or on a host either binds as a wildcard (":8080",
// "0.0.0.0:8080", "[::]:8080"), or on localhost and a loopback address.
// An address that does not parse is left for the listener to report.
func samePort(a, b string) bool {
	ha, pa, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	hb, pb, err := net.SplitHostPort(b)
	if err != nil || pa != pb || pa == "" || pa == "0" {
		return false
	}
	wildcard := func(h string) bool {
		ip, err := netip.ParseAddr(h)
		return h == "" || (err == nil && ip.IsUnspecified())
	}
	loopback := func(h string) bool {
		ip, err := netip.ParseAddr(h)
		return strings.EqualFold(h, "localhost") || (err == nil && ip.IsLoopback())
	}
	same := func(x, y string) bool {
		ix, errx := netip.ParseAddr(x)
		iy, erry := netip.ParseAddr(y)
		if errx == nil && erry == nil {
			return ix.Unmap() == iy.Unmap()
		}
		return strings.EqualFold(x, y)
	}
	return same(ha, hb) || wildcard(ha) || wildcard(hb) ||
		(strings.EqualFold(ha, "localhost") && loopback(hb)) || (strings.EqualFold(hb, "localhost") && loopback(ha))
}

// uiKey decodes TOOLSVC_UI_SESSION_KEY (nil when unset).
func (c Config) uiKey() ([]byte, error) {
	if c.UISessionKey == "" {
		return nil, nil
	}
	k, err := hex.DecodeString(c.UISessionKey)
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("TOOLSVC_UI_SESSION_KEY must be 64 hex digits (32 bytes; e.g. openssl rand -hex 32)")
	}
	return k, nil
}

// publicURL is where people reach the service: TOOLSVC_PUBLIC_URL, else
// TOOLSVC_ADDR with the scheme it serves (a link to http:// of an HTTPS
// port is answered 400). An address without a host (":8080", "0.0.0.0:8080",
// "[::]:8080", as in the Dockerfile and deploy/) gets localhost, so that the
// link opens at least where the service runs, rather than "http://:8080",
// which opens nowhere; the notifier warns of such links (notify.Dispatcher.Load).
func (c Config) publicURL() string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	scheme := "http://"
	if c.TLSCertFile != "" {
		scheme = "https://"
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return scheme + c.Addr
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return scheme + net.JoinHostPort(host, port)
}

// defaultRate is the service's default rate limit; nil is none.
func (c Config) defaultRate() *policy.RateLimitSpec {
	if c.RateLimit <= 0 {
		return nil
	}
	return &policy.RateLimitSpec{PerSecond: c.RateLimit, Burst: c.RateLimitBurst}
}

// storeCommitMax is TOOLSVC_STORE_COMMIT_MAX, 128 when unset, on both
// stores: measured through the service (BENCHMARKS.md), grouping nearly
// doubled the rate of side-effecting calls on PostgreSQL and gave 2.6
// times the rate with a lower p99 on the embedded store (with at least two
// Ps; see minProcs).
func (c Config) storeCommitMax() int {
	if c.StoreCommitMax > 0 {
		return c.StoreCommitMax
	}
	return 128
}

// maxConcurrency is TOOLSVC_MAX_CONCURRENCY, derived from the CPUs the Go
// runtime uses when unset (GOMAXPROCS: a container's CPU limit, where one
// is set, not the node's cores: 64 cores gave a 2-CPU pod 256 process
// tools at once).
func (c Config) maxConcurrency() int {
	if c.MaxConcurrency > 0 {
		return c.MaxConcurrency
	}
	return 64 * runtime.GOMAXPROCS(0)
}

// processConcurrency is TOOLSVC_PROCESS_TOOL_CONCURRENCY, derived from the
// CPUs the Go runtime uses when unset (see maxConcurrency): starting a sandboxed process costs CPU, so more
// at once than a few per CPU only queues them in the kernel.
func (c Config) processConcurrency() int {
	if c.ProcessConcurrency > 0 {
		return c.ProcessConcurrency
	}
	return 4 * runtime.GOMAXPROCS(0)
}

// ByteSize is a number of bytes written as 512MiB, 1GiB, 64KB or 1048576.
type ByteSize uint64

// UnmarshalText parses a byte size.
func (b *ByteSize) UnmarshalText(t []byte) error {
	s := strings.TrimSpace(string(t))
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return fmt.Errorf("%q is not a byte size (e.g. 512MiB, 1GiB, 1048576)", string(t))
	}
	*b = ByteSize(n * mult)
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("TOOLSVC_LOG_LEVEL must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}
