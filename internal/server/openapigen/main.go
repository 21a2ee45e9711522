// Package main is the command openapigen, which writes api/openapi.json
// from the server's route table, the types of package api and
// api/openapi-overlay.yaml (see package internal/openapi). With -check it
// writes nothing and fails when the checked-in document differs from the
// generated one (make lint runs it so).
//
//	go run ./internal/server/openapigen [-check] [-root DIR]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/internal/server"
)

func main() {
	check := flag.Bool("check", false, "fail if api/openapi.json is not what the code generates; write nothing")
	draft := flag.Bool("draft", false, "write what the code alone generates, without the completeness checks, to stdout")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := run(*root, *check, *draft); err != nil {
		fmt.Fprintln(os.Stderr, "openapigen:", err)
		os.Exit(1)
	}
}

func run(root string, check, draft bool) error {
	dir := filepath.Join(root, "api")
	overlay, err := os.ReadFile(filepath.Join(dir, "openapi-overlay.yaml"))
	if draft {
		overlay, err = []byte("{}"), nil
	}
	if err != nil {
		return err
	}
	doc, err := server.GenerateOpenAPI(overlay, dir, draft)
	if err != nil {
		return err
	}
	if draft {
		_, err := os.Stdout.Write(doc)
		return err
	}
	out := filepath.Join(dir, "openapi.json")
	if check {
		old, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		if !bytes.Equal(old, doc) {
			return fmt.Errorf("%s is not what the code generates: run go generate ./api (go run ./internal/server/openapigen)", out)
		}
		return nil
	}
	return os.WriteFile(out, doc, 0o644)
}
