package debezium

import (
	"fmt"
	"regexp"
	"strings"
)

// providerRef is Kafka's ConfigTransformer pattern: ${provider:[path:]key}.
// A reference without a colon, such as the outbox router's
// ${routedByValue}, is not one and stays as written.
var providerRef = regexp.MustCompile(`\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}`)

// Env looks up what config providers need from outside the file.
type Env struct {
	// Getenv returns an environment variable; nil reads none.
	Getenv func(string) (string, bool)
	// ReadFile reads a file for ${file:...} and ${directory:...}; nil
	// reads none.
	ReadFile func(string) ([]byte, error)
}

// resolveProviders replaces ${file:path:key}, ${directory:path:key} and
// ${env:VAR} the way Kafka's FileConfigProvider, DirectoryConfigProvider
// and EnvVarConfigProvider would, whether or not the worker declares them
// (the connector file cannot say). In a Connect file any other provider is
// an error naming the option, since its secret cannot be read here; in a
// Debezium Server file, where ${NAME:default} is a MicroProfile expression
// of the same shape, other references are left to expandServer.
func resolveProviders(option, value string, env Env, server bool) (string, error) {
	if !strings.Contains(value, "${") {
		return value, nil
	}
	var firstErr error
	out := providerRef.ReplaceAllStringFunc(value, func(ref string) string {
		m := providerRef.FindStringSubmatch(ref)
		provider, path, key := m[1], m[2], m[3]
		if server && provider != "file" && provider != "directory" && provider != "env" {
			return ref
		}
		v, err := lookupProvider(provider, path, key, env)
		if err != nil {
			if firstErr == nil {
				firstErr = &OptionError{Option: option, Err: fmt.Errorf("%s: %w", ref, err)}
			}
			return ref
		}
		return v
	})
	return out, firstErr
}

func lookupProvider(provider, path, key string, env Env) (string, error) {
	switch provider {
	case "env":
		if path != "" {
			return "", fmt.Errorf("the env provider takes no path: write ${env:VARIABLE}")
		}
		if env.Getenv != nil {
			if v, ok := env.Getenv(key); ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("environment variable %s is not set", key)
	case "file":
		if env.ReadFile == nil {
			return "", fmt.Errorf("reading files is not allowed here")
		}
		data, err := env.ReadFile(path)
		if err != nil {
			return "", err
		}
		props, err := ParseProperties(data)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if v, ok := props.Get(key); ok {
			return v, nil
		}
		return "", fmt.Errorf("%s has no key %q", path, key)
	case "directory":
		if env.ReadFile == nil {
			return "", fmt.Errorf("reading files is not allowed here")
		}
		if strings.Contains(key, "/") || key == ".." {
			return "", fmt.Errorf("%q is not a file name", key)
		}
		data, err := env.ReadFile(strings.TrimSuffix(path, "/") + "/" + key)
		if err != nil {
			return "", err
		}
		return string(data), nil
	}
	return "", fmt.Errorf("config provider %q is not supported (outboxrelay reads file, directory and env); resolve the value before passing the file, or set the option in the environment", provider)
}

// mpExpr is a MicroProfile Config property expression as Debezium Server
// (Quarkus) expands them: ${NAME} or ${NAME:default}.
var mpExpr = regexp.MustCompile(`\$\{([^{}:]+)(?::([^{}]*))?\}`)

// expandServer expands the MicroProfile expressions of a Debezium Server
// value: NAME is looked up among the file's own properties, then in the
// environment (as written, then with non-alphanumerics as underscores,
// then upper-cased, as MicroProfile's environment source does). An
// expression that resolves nowhere and has no default stays as written,
// which is what the outbox router's ${routedByValue} needs; unresolved
// reports the others.
func expandServer(value string, props *Properties, env Env) (out string, unresolved []string) {
	if !strings.Contains(value, "${") {
		return value, nil
	}
	out = mpExpr.ReplaceAllStringFunc(value, func(ref string) string {
		m := mpExpr.FindStringSubmatch(ref)
		name, def, hasDef := m[1], m[2], strings.Contains(ref, ":")
		if v, ok := props.Get(name); ok && !strings.Contains(v, "${") {
			return v
		}
		if env.Getenv != nil {
			sanitized := strings.Map(func(r rune) rune {
				if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
					return r
				}
				return '_'
			}, name)
			for _, n := range []string{name, sanitized, strings.ToUpper(sanitized)} {
				if v, ok := env.Getenv(n); ok {
					return v
				}
			}
		}
		if hasDef {
			return def
		}
		if name != "routedByValue" {
			unresolved = append(unresolved, ref)
		}
		return ref
	})
	return out, unresolved
}
