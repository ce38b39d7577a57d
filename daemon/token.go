package daemon

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"

	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// EnsureResetToken readies the operator token of a config that generates
// its own (http.generate_reset_token): it reads the token in
// http.reset_token_file or, when that file does not exist, creates it
// with a fresh random token — 32 bytes from crypto/rand (256 bits), 43
// characters of unpadded URL-safe base64, mode 0600, written whole or not
// at all and never over an existing file (secretfile.Create) — and sets
// cfg.HTTP.ResetToken to it. It reports whether it created the file.
//
// A token found there is used as it is, so it survives restarts and an
// operator may write their own; one that is unreadable, loosely
// permitted or too short is an error, never replaced. A config that does
// not generate its token, or whose token is already set (inline, or read
// at load), is left alone. `run` calls it before Start, the way Start
// creates the MQTT logins; the token itself is never printed or logged.
func EnsureResetToken(cfg *config.Config) (created bool, err error) {
	h := &cfg.HTTP
	return ensureToken(cfg, "http.reset_token_file", h.GenerateResetToken, h.ResetTokenFile, &h.ResetToken)
}

// EnsureViewerToken is EnsureResetToken for the viewer token
// (http.viewer_token_file with http.generate_viewer_token), the login that
// may read and halt but never reset. A viewer token equal to the operator
// token is an error: a viewer could then reset.
func EnsureViewerToken(cfg *config.Config) (created bool, err error) {
	h := &cfg.HTTP
	created, err = ensureToken(cfg, "http.viewer_token_file", h.GenerateViewerToken, h.ViewerTokenFile, &h.ViewerToken)
	if err == nil && h.ViewerToken != "" && h.ViewerToken == h.ResetToken {
		err = fmt.Errorf("%s: http.viewer_token_file: %s holds the operator token: the viewer token must be another, or a viewer could reset",
			cfg.Where("http.viewer_token_file"), h.ViewerTokenFile)
	}
	return created, err
}

// ensureToken reads, or creates, the generated token of the config key
// key, kept in path, into *into.
func ensureToken(cfg *config.Config, key string, generate bool, path string, into *config.Secret) (created bool, err error) {
	if !generate || *into != "" || path == "" {
		return false, nil
	}
	where := func(err error) error {
		return fmt.Errorf("%s: %s: %w", cfg.Where(key), key, err)
	}
	token, err := secretfile.Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return false, where(fmt.Errorf("generating the token for %s: %w", path, err))
		}
		token = base64.RawURLEncoding.EncodeToString(b[:])
		switch err = secretfile.Create(path, token); {
		case err == nil:
			created = true
		case errors.Is(err, fs.ErrExist):
			// Written by someone else since the read: theirs stands.
			token, err = secretfile.Read(path)
		}
	}
	if err != nil {
		return false, where(err)
	}
	if err := config.CheckResetToken(token); err != nil {
		return false, where(fmt.Errorf("%s: %w; delete the file and restart for a generated one", path, err))
	}
	*into = config.Secret(token)
	return created, nil
}
