package cleanup

import (
	"errors"
	"slices"
	"testing"
)

func TestCleanRunsLastFirstOnce(t *testing.T) {
	var got []int
	c := Make()
	for i := range 3 {
		c.AddFunc(func() { got = append(got, i) })
	}
	c.Clean()
	c.Clean()
	if !slices.Equal(got, []int{2, 1, 0}) {
		t.Fatalf("ran %v, want [2 1 0]", got)
	}
}

func TestReleaseDisarms(t *testing.T) {
	ran := 0
	c := Make()
	c.AddFunc(func() { ran++ })
	undo := c.Release()
	c.Clean()
	if ran != 0 {
		t.Fatalf("Clean after Release ran %d steps", ran)
	}
	if err := undo(); err != nil || ran != 1 {
		t.Fatalf("released steps: ran %d, err %v", ran, err)
	}
}

func TestErrorsAreKept(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	c := Make()
	c.Add(func() error { return e1 })
	c.Add(func() error { return nil })
	c.Add(func() error { return e2 })
	c.Clean()
	if err := c.Err(); !errors.Is(err, e1) || !errors.Is(err, e2) {
		t.Fatalf("Err() = %v, want both", err)
	}
}
