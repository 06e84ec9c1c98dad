package loadtest

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The files --out writes.
const (
	OutCSV        = "pods.csv"
	OutLatencyCDF = "latency-cdf" // .png and .svg
	OutThroughput = "throughput"  // .png and .svg
)

// cdfPoints bounds the points a stage's CDF is drawn with, so that the SVG stays small whatever the
// number of pods.
const cdfPoints = 200

// writeOut writes the run's pods as a CSV and its plots into dir.
func writeOut(dir string, res *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, OutCSV), res); err != nil {
		return err
	}
	cdf, err := latencyCDFPlot(res)
	if err != nil {
		return err
	}
	tput, err := throughputPlot(res)
	if err != nil {
		return err
	}
	for _, ext := range []string{".png", ".svg"} {
		if err := cdf.Save(8*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, OutLatencyCDF+ext)); err != nil {
			return err
		}
		if err := tput.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(dir, OutThroughput+ext)); err != nil {
			return err
		}
	}
	return nil
}

// csvHeader: the pod, then each time in milliseconds since the run's start (sent is the latencies'
// origin: the intended start under --rate; posted is when the POST went), then each stage's latency
// from sent. A stage not reached is empty.
func csvHeader() []string {
	h := []string{"pod", "sent_ms", "posted_ms"}
	for _, s := range stages {
		h = append(h, s+"_ms")
	}
	for _, s := range stages {
		h = append(h, s+"_latency_ms")
	}
	return h
}

func writeCSV(path string, res *Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	ms := func(t, from time.Time) string {
		if t.IsZero() || from.IsZero() {
			return ""
		}
		return strconv.FormatFloat(float64(t.Sub(from))/float64(time.Millisecond), 'f', 3, 64)
	}
	_ = w.Write(csvHeader())
	for _, p := range res.pods {
		row := []string{p.name, ms(p.sent, res.start), ms(p.posted, res.start)}
		for _, at := range p.at {
			row = append(row, ms(at, res.start))
		}
		for _, at := range p.at {
			row = append(row, ms(at, p.sent))
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runLabel names a run in a plot's title.
func runLabel(res *Result) string {
	nodes := ""
	if res.Nodes > 0 {
		nodes = fmt.Sprintf(", %d nodes", res.Nodes)
	}
	if res.rate > 0 {
		return fmt.Sprintf(" (%d pods at %g/s%s)", res.Pods, res.rate, nodes)
	}
	return fmt.Sprintf(" (%d pods%s)", res.Pods, nodes)
}

// latencyCDFPlot draws, per stage, the fraction of pods that reached it within a latency (log scale).
func latencyCDFPlot(res *Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "podbus loadtest: latency per stage" + runLabel(res)
	p.X.Label.Text = "latency from sent (ms, log scale)"
	p.Y.Label.Text = "fraction of pods"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = decadeTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = true, true // a CDF leaves the top left empty
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(10), vg.Points(-10)
	p.Add(plotter.NewGrid())
	for si, s := range stages {
		var ds []float64
		for _, pod := range res.pods {
			if !pod.at[si].IsZero() && !pod.sent.IsZero() {
				// The log scale needs positive values: a microsecond stands for anything shorter.
				ds = append(ds, max(float64(pod.at[si].Sub(pod.sent))/float64(time.Millisecond), 0.001))
			}
		}
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		n := min(len(ds), cdfPoints)
		xys := make(plotter.XYs, 0, n+1)
		xys = append(xys, plotter.XY{X: ds[0], Y: 0})
		for k := 1; k <= n; k++ {
			i := k*len(ds)/n - 1
			xys = append(xys, plotter.XY{X: ds[i], Y: float64(i+1) / float64(len(res.pods))})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(si)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s, l)
	}
	return p, nil
}

// throughputPlot draws pods created and pods Ready per second over the run, in one-second bins (bins
// of a twentieth of the run when it is shorter than twenty seconds).
func throughputPlot(res *Result) (*plot.Plot, error) {
	var end time.Time
	for _, pod := range res.pods {
		for _, at := range pod.at {
			end = maxTime(end, at)
		}
	}
	span := max(end.Sub(res.start), 0)
	bin := time.Second
	if span < 20*time.Second {
		bin = max(span/20, time.Millisecond)
	}
	nbins := int(span/bin) + 1
	p := plot.New()
	p.Title.Text = "podbus loadtest: throughput" + runLabel(res)
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "pods/s"
	p.Y.Tick.Marker = linearTicks{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(10)
	p.Add(plotter.NewGrid())
	for k, si := range []int{0, 4} {
		counts := make([]int, nbins)
		for _, pod := range res.pods {
			if at := pod.at[si]; !at.IsZero() {
				counts[int(at.Sub(res.start)/bin)]++
			}
		}
		xys := make(plotter.XYs, nbins)
		for i, c := range counts {
			xys[i] = plotter.XY{X: (time.Duration(i)*bin + bin/2).Seconds(), Y: float64(c) / bin.Seconds()}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = []color.Color{plotutil.Color(0), plotutil.Color(4)}[k]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(stages[si], l)
	}
	if res.rate > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: res.rate}, {X: span.Seconds(), Y: res.rate}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 96}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("rate asked", l)
	}
	// Room above the peaks for the legend.
	p.Y.Min, p.Y.Max = 0, p.Y.Max*1.3
	return p, nil
}

// linearTicks labels round values (1, 2 or 5 times a power of ten apart) with no trailing zeros.
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', -1, 64)}}
	}
	raw := (hi - lo) / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow
	for _, m := range []float64{2, 5, 10} {
		if step >= raw {
			break
		}
		step = m * pow
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		// Rounded to the step's digits: a multiple of 0.1 is not exact in binary.
		v, _ := strconv.ParseFloat(strconv.FormatFloat(i*step, 'g', 12, 64), 64)
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
	}
	return ticks
}

// decadeTicks labels 1, 2 and 5 of every decade of a log axis, with the other digits as minor ticks:
// a run's latencies often span less than a decade, where plot.LogTicks labels at most one value.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for m := 1.0; m < 10; m++ {
			v := m * d
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
