package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/httpauth"
	"github.com/freqcap/freqcap/internal/protoconv"
)

// Op is an operation a caller may be granted.
type Op string

// The operations. Take covers Take and TakeBatch, Peek covers Peek and
// PeekBatch, Reserve covers Reserve, Commit and Cancel. Inspect also
// covers ListOverrides on the policy and, granted on every policy ("*"),
// the policy store's reads (PlanPolicies, PolicyHistory,
// GetPolicyVersion) and GetPerson. Admin covers SetOverride and
// DeleteOverride on the policy and, granted on every policy,
// ApplyPolicies and RollbackPolicies, LinkIdentity, UnlinkIdentity and
// SetPersonZone, and everything Inspect covers. ListPolicies needs no
// grant: it lists the policies the caller has any grant on.
const (
	OpTake    Op = "take"
	OpPeek    Op = "peek"
	OpReserve Op = "reserve"
	OpInspect Op = "inspect"
	OpReset   Op = "reset"
	OpAdmin   Op = "admin"
)

// Ops are every operation, in the order they are listed. A grant of "*"
// operations covers all of them but OpAdmin, which is only ever granted
// by name: credentials written before it existed gain no writes.
var Ops = []Op{OpTake, OpPeek, OpReserve, OpInspect, OpReset, OpAdmin}

// MinSecretLen is the shortest secret a caller may have, in bytes.
const MinSecretLen = 8

// Grant lets a caller do Ops on Policies. A "*" in either means all.
type Grant struct {
	Ops      []Op
	Policies []string
}

// Caller is a named credential: a bearer secret and what it may do. The
// name is what logs and the audit log record (never the secret).
type Caller struct {
	Name   string
	Secret string
	Grants []Grant
}

// allows reports whether c may do op on policy. Admin is only granted by
// name, never by "*"; it implies Inspect.
func (c *Caller) allows(op Op, policy string) bool {
	for _, g := range c.Grants {
		if (slices.Contains(g.Ops, op) || op != OpAdmin && slices.Contains(g.Ops, "*") ||
			op == OpInspect && slices.Contains(g.Ops, OpAdmin)) &&
			(slices.Contains(g.Policies, policy) || slices.Contains(g.Policies, "*")) {
			return true
		}
	}
	return false
}

// onEveryPolicy checks that the call's caller may do op on every policy
// ("*"), as what (the policy store, identity links) needs: no policy's
// grant covers what reaches every policy. The error is PermissionDenied.
func onEveryPolicy(ctx context.Context, op Op, what string) error {
	c := callerOf(ctx)
	if c != nil && c.allows(op, "*") {
		return nil
	}
	who := "this caller"
	if c != nil {
		who = fmt.Sprintf("credential %q", c.Name)
	}
	return protoconv.NewError(connect.CodePermissionDenied, freqcapv1.Reason_REASON_PERMISSION_DENIED,
		fmt.Sprintf("%s may not %s %s (it needs %s on every policy: %s@*)", who, op, what, op, op))
}

// mayUse reports whether c has any grant on policy.
func (c *Caller) mayUse(policy string) bool {
	for _, g := range c.Grants {
		if slices.Contains(g.Policies, policy) || slices.Contains(g.Policies, "*") {
			return true
		}
	}
	return false
}

// ParseCaller reads one credential, "name:secret:grant[;grant…]", where a
// grant is "op[,op…]@policy[,policy…]" ("*" for all operations or all
// policies; "*" operations are all but admin, which is granted by name):
// "sender:S3cretS3cret:take,peek@push;peek@email", "support:…:*@*",
// "ops:…:*,admin@*". Errors never contain the secret.
func ParseCaller(s string) (Caller, error) {
	name, rest, ok1 := strings.Cut(s, ":")
	secret, grants, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return Caller{}, errors.New(`a credential is "name:secret:grant[;grant…]"`)
	}
	if !validCallerName(name) {
		return Caller{}, fmt.Errorf("credential name %q: want [A-Za-z0-9_.@-]{1,64}", name)
	}
	if len(secret) < MinSecretLen {
		return Caller{}, fmt.Errorf("credential %q: the secret must be at least %d bytes", name, MinSecretLen)
	}
	if strings.ContainsAny(secret, " \t\r\n") {
		return Caller{}, fmt.Errorf("credential %q: the secret may not contain spaces", name)
	}
	c := Caller{Name: name, Secret: secret}
	for _, gs := range strings.Split(grants, ";") {
		ops, pols, ok := strings.Cut(gs, "@")
		if !ok {
			return Caller{}, fmt.Errorf(`credential %q: grant %q: want "op[,op…]@policy[,policy…]"`, name, gs)
		}
		var g Grant
		for _, o := range strings.Split(ops, ",") {
			op := Op(strings.TrimSpace(o))
			if op != "*" && !slices.Contains(Ops, op) {
				return Caller{}, fmt.Errorf("credential %q: unknown operation %q (want take, peek, reserve, inspect, reset, admin or *)", name, op)
			}
			g.Ops = append(g.Ops, op)
		}
		for _, p := range strings.Split(pols, ",") {
			if p = strings.TrimSpace(p); p == "" {
				return Caller{}, fmt.Errorf("credential %q: grant %q: empty policy name", name, gs)
			}
			g.Policies = append(g.Policies, p)
		}
		c.Grants = append(c.Grants, g)
	}
	return c, nil
}

// ParseCallers reads credentials separated by white space (the form of
// $FREQCAP_SERVE_TOKENS). An empty list is no credentials.
func ParseCallers(list string) ([]Caller, error) {
	var out []Caller
	for _, f := range strings.Fields(list) {
		c, err := ParseCaller(f)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func validCallerName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.@-", c) >= 0) {
			return false
		}
	}
	return true
}

// callers authenticates bearer secrets.
type callers struct {
	list    []Caller
	digests []httpauth.Digest
}

func newCallers(list []Caller) (*callers, error) {
	cs := &callers{list: list}
	names := map[string]bool{}
	for _, c := range list {
		if !validCallerName(c.Name) {
			return nil, fmt.Errorf("serve: credential name %q: want [A-Za-z0-9_.@-]{1,64}", c.Name)
		}
		if names[c.Name] {
			return nil, fmt.Errorf("serve: two credentials are named %q", c.Name)
		}
		names[c.Name] = true
		if len(c.Secret) < MinSecretLen {
			return nil, fmt.Errorf("serve: credential %q: the secret must be at least %d bytes", c.Name, MinSecretLen)
		}
		if httpauth.Match(cs.digests, c.Secret) >= 0 {
			return nil, fmt.Errorf("serve: credential %q has the secret of another one", c.Name)
		}
		cs.digests = append(cs.digests, httpauth.DigestOf(c.Secret))
	}
	return cs, nil
}

// find returns the caller whose secret is given (httpauth.Match: every
// secret compared, in constant time), or nil.
func (cs *callers) find(secret string) *Caller {
	i := httpauth.Match(cs.digests, secret)
	if i < 0 {
		return nil
	}
	return &cs.list[i]
}

// local is the caller of a server without credentials (loopback only):
// everything is allowed but OpAdmin, which "*" never grants.
var local = &Caller{Name: "local", Grants: []Grant{{Ops: []Op{"*"}, Policies: []string{"*"}}}}

// ErrInsecureAddr is returned for a non-loopback listen address on a
// server without credentials.
var ErrInsecureAddr = errors.New("serve: without credentials (--token or $FREQCAP_SERVE_TOKENS) freqcap serve listens on loopback only")

// CheckAddr refuses a listen address that is not loopback when the
// server has no credentials.
func CheckAddr(addr string, withCredentials bool) error {
	loopback, err := httpauth.LoopbackAddr(addr)
	if err != nil {
		return fmt.Errorf("serve: address %q: %w", addr, err)
	}
	if withCredentials || loopback {
		return nil
	}
	return ErrInsecureAddr
}
