package webview

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"pct": func(n, total int) string {
		if total == 0 {
			return "0"
		}
		return fmt.Sprintf("%.1f", 100*float64(n)/float64(total))
	},
	"ms":     fmtDuration,
	"clock":  func(t time.Time) string { return t.Local().Format("15:04:05") },
	"stages": func() []string { return stageNames[:] },
}).ParseFS(templateFS, "templates/*.html"))

// fmtDuration prints d in milliseconds below ten seconds, in seconds above.
func fmtDuration(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func render(name string, data any) (string, error) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("render %s: %w", name, err)
	}
	return b.String(), nil
}

// writePage renders a page or a fragment to w.
func (v *View) writePage(w http.ResponseWriter, name string, data any) {
	out, err := render(name, data)
	if err != nil {
		v.log.Error("web view", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(out))
}

func (v *View) handleIndex(w http.ResponseWriter, _ *http.Request) {
	v.writePage(w, "index", struct {
		Title string
		Snap  snapshot
	}{"live view", v.model.snapshot()})
}
