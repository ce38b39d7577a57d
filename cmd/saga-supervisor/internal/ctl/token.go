package ctl

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
)

// operatorToken is the token a reset sends: --token, the file --token-file
// names, or else the supervisor's own token file (g.tokenFile: the default
// config's, or the one --config names), read the way ctl reads its agent's
// generated password.
func (g *globals) operatorToken(token, tokenFile string) (string, error) {
	switch {
	case token != "" && tokenFile != "":
		return "", errors.New("reset: give --token or --token-file, not both")
	case token != "":
		return token, nil
	case tokenFile != "":
		t, err := readSecret(tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return t, nil
	case g.tokenFile == "":
		return "", fmt.Errorf("reset: %s names no operator token file (http.reset_token_file): give --token-file FILE", g.configName())
	}
	t, err := readSecret(g.tokenFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("reset: no operator token in %s (http.reset_token_file of %s): the supervisor writes it at start; "+
			"run ctl in the supervisor's working directory, or give --config FILE or --token-file FILE: %w", g.tokenFile, g.configName(), err)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("reset: the operator token %s is private to the supervisor's user: run ctl as that user (e.g. sudo -u saga), or give --token-file FILE: %w", g.tokenFile, err)
	case err != nil:
		return "", fmt.Errorf("reset: operator token (http.reset_token_file of %s): %w", g.configName(), err)
	}
	return t, nil
}

// configName names the config ctl takes the supervisor's settings from.
func (g *globals) configName() string {
	if g.configFile == "" {
		return "the embedded default config"
	}
	return g.configFile
}

// resetHint is the command that clears a halt of this supervisor, as the
// halt warning prints it: ctl reset, with the config ctl was given, and
// --token-file only when no config names the operator token's file.
func (g *globals) resetHint() string {
	hint := "saga-supervisor ctl"
	if g.configFile != "" {
		hint += " --config " + cli.ShellQuote(g.configFile)
	}
	hint += " reset"
	if g.tokenFile == "" {
		hint += " --token-file FILE"
	}
	return hint
}
