package config

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/monovertex/monovertex/runner"
)

// knativeDefaults lets what Knative injects stand in for the runner's own
// settings the user did not set: NAME for MV_NAME (Knative's source
// controllers name an adapter by it), and K_LOGGING_CONFIG's level for
// MV_LOG_LEVEL.
func (c *Config) knativeDefaults(e env) error {
	if _, set := e.lookup("MV_NAME"); !set && c.KnativeName != "" {
		c.Name = c.KnativeName
	}
	if _, set := e.lookup("MV_LOG_LEVEL"); set || c.LoggingConfig == "" {
		return nil
	}
	level, err := knativeLogLevel(c.LoggingConfig, c.Component)
	if err != nil {
		return &runner.ConfigError{Var: "K_LOGGING_CONFIG", Value: c.LoggingConfig, Reason: err.Error()}
	}
	if level != "" {
		c.LogLevel = level
	}
	return nil
}

// knativeLogLevel reads the log level from Knative's logging config as
// knative.dev/pkg/logging reads it (JSONToConfig, NewConfigFromMap,
// NewLoggerFromConfig): a JSON object of strings whose
// "loglevel.<component>" wins over the "level" of the zap config in
// "zap-logger-config"; "" when neither says. zap's dpanic, panic and fatal
// levels, which the runner has not, become error.
func knativeLogLevel(jsonCfg, component string) (string, error) {
	var data map[string]string
	if err := json.Unmarshal([]byte(jsonCfg), &data); err != nil {
		return "", fmt.Errorf(`must be Knative's logging config as JSON, such as {"zap-logger-config":"{\"level\":\"info\"}","loglevel.%s":"debug"}: %v`, component, err)
	}
	level := data["loglevel."+component]
	if level == "" {
		if zc := data["zap-logger-config"]; zc != "" {
			var z struct {
				Level string `json:"level"`
			}
			if err := json.Unmarshal([]byte(zc), &z); err != nil {
				return "", fmt.Errorf("zap-logger-config must be a zap config as JSON: %v", err)
			}
			level = z.Level
		}
	}
	switch l := strings.ToLower(strings.TrimSpace(level)); l {
	case "":
		return "", nil
	case "debug", "info", "warn", "error":
		return l, nil
	case "warning":
		return "warn", nil
	case "dpanic", "panic", "fatal":
		return "error", nil
	}
	return "", fmt.Errorf("level %q must be debug, info, warn, error, dpanic, panic or fatal", level)
}
