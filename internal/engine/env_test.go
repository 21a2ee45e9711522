package engine_test

import (
	"testing"

	"github.com/berth-sh/berth/internal/engine/enginetest"
)

func TestMain(m *testing.M) { enginetest.Main(m) }

// env is the engine's shared test harness with this package's own
// helpers.
type env struct{ *enginetest.Env }

func newEnv(t *testing.T, opts ...enginetest.Option) *env {
	t.Helper()
	return &env{enginetest.NewEnv(t, opts...)}
}
