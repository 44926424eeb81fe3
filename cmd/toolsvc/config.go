package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Config is every process setting; this is the only place the
// environment is read.
type Config struct {
	Addr               string        `env:"TOOLSVC_ADDR" envDefault:"127.0.0.1:8080"`
	ConfigPaths        []string      `env:"TOOLSVC_CONFIG" envSeparator:","`
	Workspace          string        `env:"TOOLSVC_WORKSPACE" envDefault:"./workspace"`
	DefaultTimeout     time.Duration `env:"TOOLSVC_DEFAULT_TIMEOUT" envDefault:"30s"`
	MaxTimeout         time.Duration `env:"TOOLSVC_MAX_TIMEOUT" envDefault:"5m"`
	MaxOutputBytes     int           `env:"TOOLSVC_MAX_OUTPUT_BYTES" envDefault:"16384"`
	ErrorMessageLimit  int           `env:"TOOLSVC_ERROR_MESSAGE_LIMIT" envDefault:"1000"`
	MaxRequestBytes    int64         `env:"TOOLSVC_MAX_REQUEST_BYTES" envDefault:"1048576"`
	MaxJSONDepth       int           `env:"TOOLSVC_MAX_JSON_DEPTH" envDefault:"64"`
	MaxConcurrency     int           `env:"TOOLSVC_MAX_CONCURRENCY" envDefault:"256"`
	MaxToolConcurrency int           `env:"TOOLSVC_MAX_TOOL_CONCURRENCY"`
	ShutdownTimeout    time.Duration `env:"TOOLSVC_SHUTDOWN_TIMEOUT" envDefault:"30s"`
	LogLevel           string        `env:"TOOLSVC_LOG_LEVEL" envDefault:"info"`
	LogFormat          string        `env:"TOOLSVC_LOG_FORMAT" envDefault:"json"`
	DataDir            string        `env:"TOOLSVC_DATA_DIR" envDefault:"./data"`
	StoreURL           string        `env:"TOOLSVC_STORE_URL"`
	StoreSchema        string        `env:"TOOLSVC_STORE_SCHEMA"`
	InstanceID         string        `env:"TOOLSVC_INSTANCE_ID"`
	Retention          time.Duration `env:"TOOLSVC_RETENTION" envDefault:"24h"`
	ApprovalTTL        time.Duration `env:"TOOLSVC_APPROVAL_TTL" envDefault:"15m"`

	APIKey          string `env:"TOOLSVC_API_KEY"`
	PolicyCostLimit uint64 `env:"TOOLSVC_POLICY_COST_LIMIT" envDefault:"1000000"`

	// Auth "none" allows serving a non-loopback address without credentials.
	Auth string `env:"TOOLSVC_AUTH"`
	// Watch reloads the configuration when its files change (SIGHUP
	// always does).
	Watch             bool          `env:"TOOLSVC_WATCH" envDefault:"false"`
	MCPConnectTimeout time.Duration `env:"TOOLSVC_MCP_CONNECT_TIMEOUT" envDefault:"10s"`

	// environ is the whole environment, for the variables resources name
	// (exec tools' env allowlists, valueFrom.env).
	environ map[string]string

	FSMaxReadBytes    int64 `env:"TOOLSVC_FS_MAX_READ_BYTES" envDefault:"1048576"`
	FSMaxWriteBytes   int64 `env:"TOOLSVC_FS_MAX_WRITE_BYTES" envDefault:"4194304"`
	FSMaxSearchBytes  int64 `env:"TOOLSVC_FS_MAX_SEARCH_BYTES" envDefault:"33554432"`
	DataMaxInputBytes int   `env:"TOOLSVC_DATA_MAX_INPUT_BYTES" envDefault:"1048576"`
	DataMaxRows       int   `env:"TOOLSVC_DATA_MAX_ROWS" envDefault:"10000"`

	ShellSandbox        string        `env:"TOOLSVC_SHELL_SANDBOX" envDefault:"best-effort"`
	ShellAllow          []string      `env:"TOOLSVC_SHELL_ALLOW" envSeparator:","`
	ShellEnvAllow       []string      `env:"TOOLSVC_SHELL_ENV_ALLOW" envSeparator:","`
	ShellReadOnlyDirs   []string      `env:"TOOLSVC_SHELL_READ_ONLY_DIRS" envSeparator:","`
	ShellCPUSeconds     uint64        `env:"TOOLSVC_SHELL_RLIMIT_CPU_SECONDS" envDefault:"60"`
	ShellAddressSpace   uint64        `env:"TOOLSVC_SHELL_RLIMIT_AS_BYTES" envDefault:"2147483648"`
	ShellFileSize       uint64        `env:"TOOLSVC_SHELL_RLIMIT_FSIZE_BYTES" envDefault:"1073741824"`
	ShellProcesses      uint64        `env:"TOOLSVC_SHELL_RLIMIT_NPROC"`
	ShellMaxOutputBytes int           `env:"TOOLSVC_SHELL_MAX_OUTPUT_BYTES" envDefault:"8192"`
	ShellMaxProcesses   int           `env:"TOOLSVC_SHELL_MAX_PROCESSES" envDefault:"32"`
	ShellTimeout        time.Duration `env:"TOOLSVC_SHELL_TIMEOUT" envDefault:"30s"`

	HTTPAllowCIDRs      []netip.Prefix `env:"TOOLSVC_HTTP_ALLOW_CIDRS" envSeparator:","`
	HTTPAllowHosts      []string       `env:"TOOLSVC_HTTP_ALLOW_HOSTS" envSeparator:","`
	HTTPDenyHosts       []string       `env:"TOOLSVC_HTTP_DENY_HOSTS" envSeparator:","`
	HTTPTimeout         time.Duration  `env:"TOOLSVC_HTTP_TIMEOUT" envDefault:"30s"`
	HTTPMaxBytes        int64          `env:"TOOLSVC_HTTP_MAX_BYTES" envDefault:"5242880"`
	HTTPDefaultBytes    int64          `env:"TOOLSVC_HTTP_DEFAULT_BYTES" envDefault:"1048576"`
	HTTPMaxRequestBytes int            `env:"TOOLSVC_HTTP_MAX_REQUEST_BYTES" envDefault:"1048576"`

	BatchParallelism int  `env:"TOOLSVC_BATCH_PARALLELISM" envDefault:"10"`
	PlanTool         bool `env:"TOOLSVC_PLAN_TOOL" envDefault:"false"`

	// TraceContent records tool arguments and outputs on spans.
	TraceContent bool `env:"TOOLSVC_TRACE_CONTENT"`
	// OpenTelemetry's standard variables; the OTLP exporter reads the rest
	// of its settings (OTEL_EXPORTER_OTLP_*) from the process environment.
	TracesExporter     string `env:"OTEL_TRACES_EXPORTER"`
	OTLPEndpoint       string `env:"OTEL_EXPORTER_OTLP_ENDPOINT"`
	OTLPTracesEndpoint string `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"`
	TracesSampler      string `env:"OTEL_TRACES_SAMPLER"`
	TracesSamplerArg   string `env:"OTEL_TRACES_SAMPLER_ARG"`
	ServiceName        string `env:"OTEL_SERVICE_NAME" envDefault:"toolsvc"`
	SDKDisabled        bool   `env:"OTEL_SDK_DISABLED"`
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
	return c, c.validate()
}

// lookupEnv reads one variable of the environment the configuration was
// loaded from.
func (c Config) lookupEnv(name string) (string, bool) {
	v, ok := c.environ[name]
	return v, ok
}

func (c Config) validate() error {
	var errs []string
	if c.DefaultTimeout <= 0 || c.MaxTimeout <= 0 {
		errs = append(errs, "TOOLSVC_DEFAULT_TIMEOUT and TOOLSVC_MAX_TIMEOUT must be positive")
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
	if c.MaxJSONDepth < 2 {
		errs = append(errs, "TOOLSVC_MAX_JSON_DEPTH must be at least 2")
	}
	if c.MaxConcurrency < 0 || c.MaxToolConcurrency < 0 {
		errs = append(errs, "TOOLSVC_MAX_CONCURRENCY and TOOLSVC_MAX_TOOL_CONCURRENCY must not be negative")
	}
	if c.BatchParallelism < 1 || c.BatchParallelism > 50 {
		errs = append(errs, "TOOLSVC_BATCH_PARALLELISM must be between 1 and 50")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err.Error())
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Sprintf("TOOLSVC_LOG_FORMAT must be json or text, got %q", c.LogFormat))
	}
	if c.MCPConnectTimeout <= 0 {
		errs = append(errs, "TOOLSVC_MCP_CONNECT_TIMEOUT must be positive")
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
	if c.Auth != "" && c.Auth != "none" {
		errs = append(errs, fmt.Sprintf("TOOLSVC_AUTH must be empty or none, got %q", c.Auth))
	}
	if len(errs) > 0 {
		return fmt.Errorf("configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("TOOLSVC_LOG_LEVEL must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}
