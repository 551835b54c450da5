package console

import (
	"context"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/fleet/whatif"
	"github.com/freqcap/freqcap/sdk"
)

// FleetWhatIf returns the WhatIf of the editor's preview: fleet/whatif's
// Estimate over rd's traffic sample, for the last hour and 24 h, in
// words (Report.String: figures with their 95% intervals and what a
// replay cannot know).
func FleetWhatIf(rd *fleet.Reader) WhatIf { return fleetWhatIf{rd} }

type fleetWhatIf struct{ rd *fleet.Reader }

func (w fleetWhatIf) Estimate(ctx context.Context, current, proposed []*sdk.Policy) (string, error) {
	r, err := whatif.Estimate(ctx, w.rd, current, proposed)
	if err != nil {
		return "", err
	}
	return r.String(), nil
}
