package console

import (
	"strings"
	"testing"
	"time"
)

func TestCodesAreOneTimeAndShortLived(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewCodes()
	code, exp := c.Mint(now)
	if !strings.HasPrefix(code, CodePrefix) || exp != now.Add(CodeTTL) {
		t.Fatalf("code %q expires %v", code, exp)
	}
	if c.Redeem(code+"x", now) || c.Redeem(strings.ToUpper(code), now) || c.Redeem("", now) {
		t.Fatal("a code that was never minted was redeemed")
	}
	if !c.Redeem(code, now.Add(CodeTTL-time.Second)) {
		t.Fatal("a fresh code was refused")
	}
	if c.Redeem(code, now) {
		t.Fatal("a code was redeemed twice (replay)")
	}
	late, _ := c.Mint(now)
	if c.Redeem(late, now.Add(CodeTTL)) {
		t.Fatal("an expired code was redeemed")
	}
	if c.Outstanding() != 0 {
		t.Fatalf("%d codes left after redeeming and expiring all", c.Outstanding())
	}
}

func TestCodesAreBounded(t *testing.T) {
	now := time.Now()
	c := NewCodes()
	first, _ := c.Mint(now)
	var last string
	for i := range MaxCodes + 5 {
		last, _ = c.Mint(now.Add(time.Duration(i+1) * time.Millisecond))
	}
	if n := c.Outstanding(); n != MaxCodes {
		t.Fatalf("%d codes outstanding, want the cap %d", n, MaxCodes)
	}
	if c.Redeem(first, now) {
		t.Fatal("the oldest code survived the cap")
	}
	if !c.Redeem(last, now) {
		t.Fatal("the newest code was evicted")
	}
}
