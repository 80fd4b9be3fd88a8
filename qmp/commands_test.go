package qmp

import (
	"encoding/json"
	"math"
	"testing"
)

func TestQueryStatsDecodesValueKinds(t *testing.T) {
	s := newFakeServer(t)
	args := make(chan string, 1)
	s.handle("query-stats", func(fc *fakeConn, req fakeRequest) {
		args <- string(req.Arguments)
		fc.reply(req, json.RawMessage(`[{"provider":"kvm","qom-path":"/machine/unattached/device[0]","stats":[
			{"name":"exits","value":42},
			{"name":"guest_mode","value":true},
			{"name":"halt_wait_hist","value":[1,2,3]}]}]`))
	})
	c := s.dial(t)

	res, err := c.QueryStats(t.Context(), StatsTargetVCPU, StatsProvider{Provider: StatsProviderKVM, Names: []string{"exits"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := <-args, `{"target":"vcpu","providers":[{"provider":"kvm","names":["exits"]}]}`; got != want {
		t.Errorf("arguments = %s, want %s", got, want)
	}
	if len(res) != 1 || res[0].QOMPath != "/machine/unattached/device[0]" || len(res[0].Stats) != 3 {
		t.Fatalf("result = %+v", res)
	}
	st := res[0].Stats
	if st[0].Value.Kind != StatScalar || st[0].Value.Scalar != 42 {
		t.Errorf("scalar = %+v", st[0])
	}
	if st[1].Value.Kind != StatBoolean || !st[1].Value.Bool {
		t.Errorf("boolean = %+v", st[1])
	}
	if st[2].Value.Kind != StatList || len(st[2].Value.List) != 3 || st[2].Value.List[2] != 3 {
		t.Errorf("list = %+v", st[2])
	}
}

func TestQueryStatsEmpty(t *testing.T) {
	s := newFakeServer(t)
	args := make(chan string, 1)
	s.handle("query-stats", func(fc *fakeConn, req fakeRequest) {
		args <- string(req.Arguments)
		fc.reply(req, []any{})
	})
	c := s.dial(t)
	res, err := c.QueryStats(t.Context(), StatsTargetVM)
	if err != nil || res == nil || len(res) != 0 {
		t.Errorf("got %#v, %v; want an empty, non-nil result", res, err)
	}
	if got := <-args; got != `{"target":"vm"}` {
		t.Errorf("arguments = %s", got)
	}
}

func TestGuestStatsUnavailableIsNil(t *testing.T) {
	s := newFakeServer(t)
	s.handle("qom-get", func(fc *fakeConn, req fakeRequest) {
		fc.reply(req, json.RawMessage(`{"last-update":1700000000,"stats":{
			"stat-free-memory":1048576,"stat-total-memory":`+jsonUint(math.MaxUint64)+`}}`))
	})
	c := s.dial(t)
	g, err := c.BalloonGuestStats(t.Context(), "/machine/peripheral/balloon0")
	if err != nil {
		t.Fatal(err)
	}
	if g.FreeMemory == nil || *g.FreeMemory != 1048576 {
		t.Errorf("FreeMemory = %v", g.FreeMemory)
	}
	if g.TotalMemory != nil || g.SwapIn != nil {
		t.Error("unreported statistics are not nil")
	}
	if g.LastUpdate.Unix() != 1700000000 {
		t.Errorf("LastUpdate = %v", g.LastUpdate)
	}
}

func jsonUint(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestMigrateSetCapabilitiesArguments(t *testing.T) {
	s := newFakeServer(t)
	args := make(chan string, 1)
	s.handle("migrate-set-capabilities", func(fc *fakeConn, req fakeRequest) {
		args <- string(req.Arguments)
		fc.reply(req, map[string]any{})
	})
	c := s.dial(t)
	if err := c.MigrateSetCapabilities(t.Context(), map[string]bool{"xbzrle": false, "events": true}); err != nil {
		t.Fatal(err)
	}
	want := `{"capabilities":[{"capability":"events","state":true},{"capability":"xbzrle","state":false}]}`
	if got := <-args; got != want {
		t.Errorf("arguments = %s, want %s", got, want)
	}
}

func TestQueryMigrateNewerStatus(t *testing.T) {
	s := newFakeServer(t)
	s.reply("query-migrate", json.RawMessage(`{"status":"wait-unplug","ram":{"transferred":10,"remaining":20,"total":30,"dirty-pages-rate":5,"mbps":1.5}}`))
	c := s.dial(t)
	m, err := c.QueryMigrate(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != MigrationWaitUnplug || m.RAM == nil || m.RAM.Total != 30 || m.RAM.DirtyPagesRate != 5 || m.RAM.Mbps != 1.5 {
		t.Errorf("got %+v ram %+v", m, m.RAM)
	}
}

func TestScreendumpFormatByVersion(t *testing.T) {
	for _, tc := range []struct {
		version [3]int
		format  string
		want    string
	}{
		{[3]int{7, 2, 0}, "", `{"filename":"/tmp/s","format":"png"}`},
		{[3]int{6, 2, 0}, "", `{"filename":"/tmp/s"}`},
		{[3]int{7, 2, 0}, ScreendumpPPM, `{"filename":"/tmp/s","format":"ppm"}`},
	} {
		s := newFakeServer(t, func(s *fakeServer) { s.version = tc.version })
		args := make(chan string, 1)
		s.handle("screendump", func(fc *fakeConn, req fakeRequest) {
			args <- string(req.Arguments)
			fc.reply(req, map[string]any{})
		})
		c := s.dial(t)
		if err := c.Screendump(t.Context(), "/tmp/s", tc.format); err != nil {
			t.Fatal(err)
		}
		if got := <-args; got != tc.want {
			t.Errorf("QEMU %v format %q: arguments %s, want %s", tc.version, tc.format, got, tc.want)
		}
	}
}

func TestQuitToleratesImmediateDisconnect(t *testing.T) {
	s := newFakeServer(t)
	s.handle("quit", func(fc *fakeConn, req fakeRequest) { fc.close() })
	c := s.dial(t)
	if err := c.Quit(t.Context()); err != nil {
		t.Errorf("Quit: %v", err)
	}
	<-c.Done()
	if err := c.Quit(t.Context()); err == nil {
		t.Error("Quit on a dead connection succeeded")
	}
}
