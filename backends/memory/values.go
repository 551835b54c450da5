package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/freqcap/freqcap/sdk/driver"
)

var _ driver.ValueLister = (*Backend)(nil)

// ListValues lists the live values of req.Set (driver.ValueLister): every
// rule state of the shard of req.Root's hash tag whose dimension set key
// extends req.Set, grouped by that key, each with when a take last stored
// one of its states (Written) and when the latest expires. Every value's
// name is known (Group); the order and the pages are
// driver.PageValues's. It reads the whole shard under its lock: the work
// is that shard's entries (all the backend's over Options.Shards), not
// the subject's alone.
func (b *Backend) ListValues(ctx context.Context, req driver.ValuesRequest) (driver.ValuesPage, error) {
	if err := ctx.Err(); err != nil {
		return driver.ValuesPage{}, fmt.Errorf("memory: values: %w", err)
	}
	if req.Root == "" || !strings.HasPrefix(req.Set, req.Root) || len(req.Set) == len(req.Root) {
		return driver.ValuesPage{}, errors.New("memory: values: Set must extend Root")
	}
	x := b.begin([]string{req.Root})
	defer x.end()
	s := x.shard(req.Root)
	prefix := req.Set + ":"
	at := map[string]int{} // group -> index in vals
	var vals []driver.Value
	for _, e := range s.entries {
		switch e.kind {
		case kindFixed, kindSliding, kindLog, kindGCRA:
		default:
			continue
		}
		if !e.exp.After(x.now) || !strings.HasPrefix(e.group, prefix) {
			continue
		}
		i, ok := at[e.group]
		if !ok {
			i = len(vals)
			at[e.group] = i
			vals = append(vals, driver.Value{Group: e.group})
		}
		v := &vals[i]
		if e.written.After(v.Written) {
			v.Written = e.written
		}
		if e.exp.After(v.Expires) {
			v.Expires = e.exp
		}
	}
	page, next, prev, err := driver.PageValues(vals, req.Cursor, req.Limit)
	if err != nil {
		return driver.ValuesPage{}, fmt.Errorf("memory: values: %w", err)
	}
	return driver.ValuesPage{Values: page, Total: len(vals), Next: next, Prev: prev, Now: x.now}, nil
}
