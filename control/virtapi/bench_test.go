package virtapi

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkLimitsOverhead prints what the server limits cost a request: console round trips
// (a keystroke through virt-api and the node API to the console and its echo back) and
// admission reviews, each against servers with and without the limits, in one run. The two
// stacks run side by side and are measured in alternating rounds, so that drift on a busy
// machine falls on both alike. Reported: p50 and p99 of each in microseconds, and the ratio
// with/without of the medians.
func BenchmarkLimitsOverhead(b *testing.B) {
	type stack struct {
		name             string
		key, post        func() time.Duration
		console, webhook []time.Duration
	}
	newStack := func(name string, o envOptions) *stack {
		e := newEnv(b, o)
		ws := e.console(b)
		b.Cleanup(func() { ws.Close() })
		c := e.client()
		s := &stack{name: name}
		s.key = func() time.Duration {
			t0 := time.Now()
			roundTrip(b, ws, "k")
			return time.Since(t0)
		}
		s.post = func() time.Duration {
			t0 := time.Now()
			resp, err := c.Do(e.request(b, http.MethodPost, "/virtualmachineinstances-validate", strings.NewReader(review)))
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			d := time.Since(t0)
			if resp.StatusCode != 200 || !strings.Contains(string(body), `"allowed":true`) {
				b.Fatalf("%s webhook: %d %s", name, resp.StatusCode, body)
			}
			return d
		}
		return s
	}
	stacks := []*stack{newStack("bare", envOptions{}), newStack("limits", envOptions{limited: true})}

	const rounds, perRound, warmup = 10, 200, 50
	for _, s := range stacks {
		for i := 0; i < warmup; i++ {
			s.key()
			s.post()
		}
	}
	for r := 0; r < rounds; r++ {
		for i := range stacks {
			s := stacks[(i+r)%len(stacks)] // the order flips every round
			for j := 0; j < perRound; j++ {
				s.console = append(s.console, s.key())
			}
			for j := 0; j < perRound; j++ {
				s.webhook = append(s.webhook, s.post())
			}
		}
	}

	bare, limited := stacks[0], stacks[1]
	report := func(what string, without, with []time.Duration) {
		slices.Sort(without)
		slices.Sort(with)
		p := func(d []time.Duration, q int) float64 { return float64(d[len(d)*q/100].Nanoseconds()) / 1e3 }
		b.ReportMetric(p(without, 50), what+"-p50-us-bare")
		b.ReportMetric(p(with, 50), what+"-p50-us-limits")
		b.ReportMetric(p(without, 99), what+"-p99-us-bare")
		b.ReportMetric(p(with, 99), what+"-p99-us-limits")
		b.ReportMetric(p(with, 50)/p(without, 50), what+"-p50-ratio")
		b.Logf("%s: p50 %.0f µs without the limits, %.0f µs with (ratio %.3f); p99 %.0f / %.0f µs; %d samples each",
			what, p(without, 50), p(with, 50), p(with, 50)/p(without, 50), p(without, 99), p(with, 99), len(with))
	}
	report("console", bare.console, limited.console)
	report("webhook", bare.webhook, limited.webhook)
}
