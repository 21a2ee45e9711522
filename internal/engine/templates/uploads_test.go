package templates_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Template archives received at once are capped: one past
// MaxConcurrentUploads is refused with limit_exceeded naming the limit,
// and accepted again once an upload ends.
func TestConcurrentUploadsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, enginetest.WithImages())
	var pipes []*io.PipeWriter
	done := make(chan error, templates.MaxConcurrentUploads)
	for i := range templates.MaxConcurrentUploads {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		go func() {
			_, err := e.Engine.UploadTemplate(e.Ctx, fmt.Sprintf("held-%d", i), pr)
			done <- err
		}()
	}
	// Each held upload reads a first byte only once it has its slot: with
	// every first byte taken, all the slots are, before any other upload
	// (the probe below) could take one from a held upload still on its way
	// to the slot — which refused that upload and left only three held.
	for _, pw := range pipes {
		if _, err := pw.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	busy := func() bool {
		_, err := e.Engine.UploadTemplate(e.Ctx, "one-more", strings.NewReader("not a tar"))
		return errors.Is(err, errdefs.ErrLimit)
	}
	if !enginetest.Poll(busy) {
		t.Fatalf("%d uploads held, one more not refused", templates.MaxConcurrentUploads)
	}
	_, err := e.Engine.UploadTemplate(e.Ctx, "one-more", strings.NewReader("not a tar"))
	if code, status := errdefs.Code(err); code != "limit_exceeded" || status != 429 || errdefs.LimitName(err) != "max_concurrent_uploads" {
		t.Fatalf("refusal: %v (%s %d)", err, code, status)
	}
	pipes[0].CloseWithError(errors.New("client went away"))
	if err := <-done; err == nil {
		t.Fatal("an upload cut short succeeded")
	}
	if !enginetest.Poll(func() bool { return !busy() }) {
		t.Fatal("no room after an upload ended")
	}
	for _, pw := range pipes[1:] {
		pw.CloseWithError(errors.New("client went away"))
	}
	for range templates.MaxConcurrentUploads - 1 {
		<-done
	}
}
