package netplumb

import (
	"context"

	"github.com/go-logr/logr"
)

// dhcpSlot is a binding's DHCP server: started once per VM, stopped by Close or Teardown, and
// by the reverter when a later Setup step fails.
type dhcpSlot struct {
	srv *DHCPServer
}

func (d *dhcpSlot) running() bool { return d.srv != nil }

func (d *dhcpSlot) start(log logr.Logger, nsPath string, cfg DHCPConfig, r *Reverter) error {
	if d.srv != nil {
		return nil
	}
	srv, err := StartDHCP(logr.NewContext(context.Background(), log), nsPath, cfg)
	if err != nil {
		return err
	}
	d.srv = srv
	r.Add("dhcp", d.stop)
	return nil
}

func (d *dhcpSlot) stop() error {
	if d.srv == nil {
		return nil
	}
	err := d.srv.Close()
	d.srv = nil
	return err
}
