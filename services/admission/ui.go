package admission

import "context"

// runUI feeds the web view (internal/webview, served under /ui/ by route) until the returned stop is
// called. The view reads the buckets only once someone opens it.
func (s *Service) runUI(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.ui.Run(ctx); err != nil {
			s.log.Warn("web view stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
