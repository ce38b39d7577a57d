package ctl

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
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

// opApprove is `ctl approve`: it prints the token on stdout, alone.
func opApprove(w io.Writer, device, keyFile, actuator string, value float64, saga uint64, ttl time.Duration) error {
	switch {
	case keyFile == "":
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
	priv, err := approval.LoadPrivateKey(keyFile)
	if err != nil {
		return usageErr(fmt.Errorf("approve: --key: %w", err))
	}
	now := time.Now()
	tok, err := approval.Sign(priv, approval.Claims{Device: device, Actuator: actuator, Value: value, Saga: saga,
		NotBefore: now, NotAfter: now.Add(ttl)})
	if err != nil {
		return cli.Exit(1, "approve: %v", err)
	}
	fmt.Fprintln(w, tok)
	return nil
}
