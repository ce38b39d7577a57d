package ctl

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
)

// opKeygen is `ctl keygen --out FILE`.
func opKeygen(w io.Writer, out string) error {
	if out == "" {
		return usageErr(errors.New("keygen: give --out FILE"))
	}
	pub, priv, err := approval.GenerateKey()
	if err != nil {
		return cli.Exit(1, "keygen: %v", err)
	}
	host, _ := os.Hostname()
	comment := "operator"
	if u := os.Getenv("USER"); u != "" {
		comment = u + "@" + host
	}
	if err := approval.WriteKeyPair(out, pub, priv, comment); err != nil {
		return cli.Exit(1, "keygen: %v", err)
	}
	fmt.Fprintf(w, "private key: %s (mode 0600: keep it secret)\npublic key:  %s.pub (key id %s): list it in approvals.public_keys\n",
		out, out, approval.KeyID(pub))
	return nil
}

// keyFileList is a repeatable flag naming private key files.
type keyFileList []string

func (k *keyFileList) String() string { return strings.Join(*k, ",") }

func (k *keyFileList) Set(v string) error {
	if v == "" {
		return errors.New("empty file name")
	}
	*k = append(*k, v)
	return nil
}

// loadApprovalKeys reads private key files, refusing one key given twice:
// its two approvals would be refused APPROVAL_DUPLICATE_KEY.
func loadApprovalKeys(files []string) ([]ed25519.PrivateKey, error) {
	if len(files) > approval.MaxPerStep {
		return nil, fmt.Errorf("%d keys: a step carries at most %d approvals", len(files), approval.MaxPerStep)
	}
	var privs []ed25519.PrivateKey
	for i, f := range files {
		priv, err := approval.LoadPrivateKey(f)
		if err != nil {
			return nil, err
		}
		for j, o := range privs {
			if o.Equal(priv) {
				return nil, fmt.Errorf("%s and %s hold the same key: each approval must come from another key", files[j], files[i])
			}
		}
		privs = append(privs, priv)
	}
	return privs, nil
}

// signAll signs c with every key, valid for ttl from now: one token each.
func signAll(privs []ed25519.PrivateKey, c approval.Claims, ttl time.Duration) ([]string, error) {
	now := time.Now()
	c.NotBefore, c.NotAfter = now, now.Add(ttl)
	toks := make([]string, 0, len(privs))
	for _, priv := range privs {
		tok, err := approval.Sign(priv, c)
		if err != nil {
			return nil, err
		}
		toks = append(toks, tok)
	}
	return toks, nil
}

// opApprove is `ctl approve`: it prints the tokens on stdout, one per key
// and per line, alone.
func opApprove(w io.Writer, device string, keyFiles []string, actuator string, value float64, saga uint64, ttl time.Duration) error {
	switch {
	case len(keyFiles) == 0:
		return usageErr(errors.New("approve: give --key FILE"))
	case actuator == "":
		return usageErr(errors.New("approve: give --actuator"))
	case math.IsNaN(value) || math.IsInf(value, 0):
		return usageErr(errors.New("approve: give --value, a finite number"))
	case saga == 0:
		return usageErr(errors.New("approve: give --saga, the saga id (from the controller's begin)"))
	case ttl <= 0 || ttl > approval.MaxTTLLimit:
		return usageErr(fmt.Errorf("approve: --ttl %v is outside 1ms..%v", ttl, approval.MaxTTLLimit))
	}
	if err := api.ValidName(actuator); err != nil {
		return usageErr(fmt.Errorf("approve: --actuator %q: %w", actuator, err))
	}
	privs, err := loadApprovalKeys(keyFiles)
	if err != nil {
		return usageErr(fmt.Errorf("approve: --key: %w", err))
	}
	toks, err := signAll(privs, approval.Claims{Device: device, Actuator: actuator, Value: value, Saga: saga}, ttl)
	if err != nil {
		return cli.Exit(1, "approve: %v", err)
	}
	for _, tok := range toks {
		fmt.Fprintln(w, tok)
	}
	return nil
}
