package bench

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// bucketMS is the width of one point of the success-rate timeline.
const bucketMS = 250.0

// timeline returns the success ratio per bucket (x in seconds).
func timeline(samples []Sample) plotter.XYs {
	type agg struct{ ok, all int }
	buckets := map[int]*agg{}
	last := 0
	for _, s := range samples {
		i := int(s.AtMS / bucketMS)
		if buckets[i] == nil {
			buckets[i] = &agg{}
		}
		buckets[i].all++
		if s.OK {
			buckets[i].ok++
		}
		last = max(last, i)
	}
	var xys plotter.XYs
	for i := 0; i <= last; i++ {
		if a := buckets[i]; a != nil {
			xys = append(xys, plotter.XY{X: float64(i) * bucketMS / 1000, Y: float64(a.ok) / float64(a.all)})
		}
	}
	return xys
}

func armPlot(r *ArmResult, xmax float64) (*plot.Plot, error) {
	p := plot.New()
	p.X.Min, p.X.Max = 0, xmax
	p.Title.Text = fmt.Sprintf("%s: %d requests, %d failed, longest etcd write stall %.0f ms", r.Arm, r.Total, r.Failed, r.WriteStallMS)
	p.X.Label.Text = "seconds since the load started"
	p.Y.Label.Text = "requests OK (per 250 ms)"
	p.Y.Min, p.Y.Max = -0.15, 1.1
	line, err := plotter.NewLine(timeline(r.Samples))
	if err != nil {
		return nil, err
	}
	line.Color = color.RGBA{B: 200, A: 255}
	line.Width = vg.Points(1.5)
	p.Add(line)
	var fails plotter.XYs
	for _, s := range r.Samples {
		if !s.OK {
			fails = append(fails, plotter.XY{X: s.AtMS / 1000, Y: -0.08})
		}
	}
	if len(fails) > 0 {
		sc, err := plotter.NewScatter(fails)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color = color.RGBA{R: 220, A: 255}
		sc.GlyphStyle.Shape = draw.CrossGlyph{}
		sc.GlyphStyle.Radius = vg.Points(3)
		p.Add(sc)
		p.Legend.Add("failed request", sc)
	}
	p.Legend.Add("success ratio", line)
	var labels plotter.XYLabels
	for i, m := range r.Markers {
		x := m.AtMS / 1000
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: -0.15}, {X: x, Y: 1.1}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 150}
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: 1.02 - 0.07*float64(i%4)})
		labels.Labels = append(labels.Labels, m.Label)
	}
	if len(labels.XYs) > 0 {
		lb, err := plotter.NewLabels(labels)
		if err != nil {
			return nil, err
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font.Size = vg.Points(7)
		}
		p.Add(lb)
	}
	p.Legend.Top = false
	return p, nil
}

// writePNG draws both arms' timelines, one above the other, into path.
func writePNG(path string, arms []*ArmResult) error {
	rows := make([][]*plot.Plot, len(arms))
	xmax := 0.0 // one time scale for every arm, so they compare at a glance
	for _, a := range arms {
		for _, s := range a.Samples {
			xmax = max(xmax, s.AtMS/1000)
		}
	}
	for i, a := range arms {
		p, err := armPlot(a, xmax)
		if err != nil {
			return err
		}
		rows[i] = []*plot.Plot{p}
	}
	img := vgimg.New(vg.Points(1000), vg.Points(320*float64(len(arms))))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(arms), Cols: 1, PadX: vg.Points(10), PadY: vg.Points(10), PadTop: vg.Points(5), PadBottom: vg.Points(5), PadLeft: vg.Points(5), PadRight: vg.Points(10)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return err
	}
	return f.Close()
}
