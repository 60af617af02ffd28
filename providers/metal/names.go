package metal

import (
	"context"

	"github.com/hamaster/hamaster/providers"
)

var _ providers.NameChooser = (*Provider)(nil)

// NextReplicaName implements providers.NameChooser: add-replica without
// --name (--host) takes the first free control-plane host of the
// inventory (FreeHost).
func (p *Provider) NextReplicaName(ctx context.Context, zone string) (string, error) {
	return p.FreeHost(ctx, zone)
}
