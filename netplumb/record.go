package netplumb

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// A record is what a binding must remember across runs: what it took from the pod interface
// (the bridge binding moves the pod's address and MAC to the guest, so they cannot be read
// back) and what it changed. It is kept in the bridge's alias, so it lives and dies with the
// namespace and a second Setup, or a Teardown in another process, needs no state file.
type record struct {
	kind     string
	guestMAC net.HardwareAddr
	// podMAC is the pod interface's MAC before the bridge binding gave it to the guest.
	podMAC net.HardwareAddr
	// addrs and routes are the pod interface's IPv4 addressing before the bridge binding
	// moved it to the guest.
	addrs  []netip.Prefix
	routes []Route
	// forward is ip_forward before the masquerade binding turned it on.
	forward string
}

const (
	recordMagic    = "qvirt-netplumb/1"
	kindBridge     = "bridge"
	kindMasquerade = "masquerade"
	// maxAlias is the kernel's IFALIASZ less the terminating NUL.
	maxAlias = 255
)

func (r *record) encode() (string, error) {
	f := []string{recordMagic, "kind=" + r.kind, "guest=" + r.guestMAC.String()}
	if r.podMAC != nil {
		f = append(f, "pod="+r.podMAC.String())
	}
	if len(r.addrs) > 0 {
		a := make([]string, len(r.addrs))
		for i, p := range r.addrs {
			a[i] = p.String()
		}
		f = append(f, "ip="+strings.Join(a, ","))
	}
	if len(r.routes) > 0 {
		a := make([]string, len(r.routes))
		for i, rt := range r.routes {
			a[i] = rt.Dst.String()
			if rt.Gateway.IsValid() {
				a[i] += "@" + rt.Gateway.String()
			}
		}
		f = append(f, "rt="+strings.Join(a, ","))
	}
	if r.forward != "" {
		f = append(f, "fwd="+r.forward)
	}
	s := strings.Join(f, " ")
	if len(s) > maxAlias {
		return "", fmt.Errorf("%w: %d bytes do not fit in an interface alias (%d)", ErrRecord, len(s), maxAlias)
	}
	return s, nil
}

func decodeRecord(s string) (*record, error) {
	f := strings.Fields(s)
	if len(f) == 0 || f[0] != recordMagic {
		return nil, fmt.Errorf("%w: alias %q", ErrRecord, s)
	}
	r := &record{}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "kind":
			r.kind = v
		case "guest":
			r.guestMAC, err = net.ParseMAC(v)
		case "pod":
			r.podMAC, err = net.ParseMAC(v)
		case "ip":
			for _, a := range strings.Split(v, ",") {
				var p netip.Prefix
				if p, err = netip.ParsePrefix(a); err != nil {
					break
				}
				r.addrs = append(r.addrs, p)
			}
		case "rt":
			for _, a := range strings.Split(v, ",") {
				dst, gw, hasGW := strings.Cut(a, "@")
				var rt Route
				if rt.Dst, err = netip.ParsePrefix(dst); err != nil {
					break
				}
				if hasGW {
					if rt.Gateway, err = netip.ParseAddr(gw); err != nil {
						break
					}
				}
				r.routes = append(r.routes, rt)
			}
		case "fwd":
			r.forward = v
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRecord, kv, err)
		}
	}
	if r.kind == "" || r.guestMAC == nil {
		return nil, fmt.Errorf("%w: alias %q lacks kind or guest MAC", ErrRecord, s)
	}
	return r, nil
}
