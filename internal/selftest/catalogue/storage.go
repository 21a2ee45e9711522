package catalogue

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// Storage rights (issue #30), tried as a tenant's key over TCP: a template
// archive is charged to the tenant's storage quota as it unpacks, and a
// layer already in the store is never handed to a tenant whose upload does
// not hash to it, and a tenant's key neither pushes a template to an
// address it names (unless the daemon allows tenant pulls) nor pushes
// another tenant's. Each attack works in tenants of its own.
func storageAttacks() []*attack.Attack {
	x := tenantAttack
	return []*attack.Attack{
		x("template-import-quota", "upload a gzip archive of a few KiB that unpacks to 64 MiB, under a storage quota of 8 MiB", "429 quota_exceeded; no template, usage unchanged",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				if _, err := e.C.SetQuota(ctx, tn.name, api.QuotaRequest{MaxStorage: 8 << 20}); err != nil {
					return attack.Escaped("set the quota: %v", err)
				}
				k, err := tn.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				img, _, err := ZerosLayerImage("bomb", 64<<20, "")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				archive, err := GzipDockerSave(img)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				st, resp, err := uploadTemplate(ctx, tcp, k.Key, "bomb", archive)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				if st < 300 {
					_, _, _ = tcp.Do(context.WithoutCancel(ctx), "DELETE", "/v1/templates/bomb", k.Key, nil)
				}
				got, _, err := tcp.Do(ctx, "GET", "/v1/templates/bomb", k.Key, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				var q api.Quota
				qst, qresp, err := tcp.Do(ctx, "GET", "/v1/quota", k.Key, nil)
				if err != nil || qst != 200 || jsonInto(qresp, &q) != nil || q.Usage == nil {
					return attack.Escaped("read the quota: %d %v %s", qst, err, attack.Clip(qresp, 80))
				}
				return attack.Judged(st == 429 && containsStr(resp, "quota_exceeded") && got == 404 && q.Usage.Storage == 0,
					"upload of %d KiB: %d %s; the template then: %d; storage usage %d", len(archive)>>10, st,
					attack.Clip(attack.OneLine(resp), 80), got, q.Usage.Storage)
			}),
		x("template-layer-forge", "import an archive whose config names another tenant's private layer id over other bytes", "400; no template of the other tenant's layer",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				victim, err := tn.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				private, layerID, err := ZerosLayerImage("private-"+e.Tag, 4096, "")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				archive, err := GzipDockerSave(private)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				if st, resp, err := uploadTemplate(ctx, tcp, victim.Key, "private", archive); err != nil || st != 201 && st != 200 {
					return attack.Escaped("the victim's upload: %d %v %s", st, err, attack.Clip(attack.OneLine(resp), 80))
				}
				defer tcp.Do(context.WithoutCancel(ctx), "DELETE", "/v1/templates/private", victim.Key, nil)
				thiefRun, err := newTenantRun(ctx, e, "template-layer-thief")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				defer thiefRun.cleanup(context.WithoutCancel(ctx))
				thief, err := thiefRun.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				forged, _, err := ZerosLayerImage("guess", 16, layerID)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				if archive, err = GzipDockerSave(forged); err != nil {
					return attack.Escaped("%v", err)
				}
				st, resp, err := uploadTemplate(ctx, tcp, thief.Key, "stolen", archive)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				if st < 300 {
					defer tcp.Do(context.WithoutCancel(ctx), "DELETE", "/v1/templates/stolen", thief.Key, nil)
				}
				got, _, err := tcp.Do(ctx, "GET", "/v1/templates/stolen", thief.Key, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st == 400 && got == 404, "upload naming the victim's layer %s: %d %s; the template then: %d",
					attack.Clip(layerID, 19), st, attack.Clip(attack.OneLine(resp), 80), got)
			}),
		x("template-push-tenant", "push the tenant's own template to an address it names, and another tenant's template, with tenant keys", "403 (tenant pushes off), and 403/404 for the other tenant's template; never a connection",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				owner, err := tn.key(ctx, "admin")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				img, _, err := ZerosLayerImage("pushed-"+e.Tag, 4096, "")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				archive, err := GzipDockerSave(img)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				if st, resp, err := uploadTemplate(ctx, tcp, owner.Key, "mine", archive); err != nil || st != 201 && st != 200 {
					return attack.Escaped("the owner's upload: %d %v %s", st, err, attack.Clip(attack.OneLine(resp), 80))
				}
				defer tcp.Do(context.WithoutCancel(ctx), "DELETE", "/v1/templates/mine", owner.Key, nil)
				// A loopback port nothing listens on: were the push let
				// through, it would still send nothing off the machine.
				req := api.PushTemplateRequest{Ref: "127.0.0.1:1/selftest/mine:1"}
				st1, r1, err := tcp.Do(ctx, "POST", "/v1/templates/mine/push", owner.Key, req)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				otherRun, err := newTenantRun(ctx, e, "template-push-other")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				defer otherRun.cleanup(context.WithoutCancel(ctx))
				other, err := otherRun.key(ctx, "admin")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				st2, r2, err := tcp.Do(ctx, "POST", "/v1/templates/mine/push", other.Key, req)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				// A daemon that allows tenant pulls (serve --tenant-pulls)
				// allows tenant pushes of their own templates too.
				pullSt, _, err := tcp.Do(ctx, "POST", "/v1/templates/import", owner.Key, api.ImportTemplateRequest{Name: "pulled", Ref: req.Ref})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				ownOK := st1 == 403 || pullSt != 403 && st1 == 502 && containsStr(r1, "registry_unreachable")
				return attack.Judged(ownOK && (st2 == 403 || st2 == 404) && !containsStr(r2, "registry_"),
					"push of its own template to %s: %d %s; of the other tenant's: %d %s", req.Ref,
					st1, attack.Clip(attack.OneLine(r1), 70), st2, attack.Clip(attack.OneLine(r2), 70))
			}),
		x("create-image-tenant", "create a sandbox from a registry image at an address it names, and from an image record by its name, with a tenant key", "403 (tenant pulls off) or the registry's 502, and 404 for the record; never a sandbox",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				k, err := tn.key(ctx, "admin")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				// A loopback port nothing listens on: were the pull let
				// through, it would still send nothing off the machine.
				ref := "127.0.0.1:1/selftest/task:1"
				st1, r1, err := tcp.Do(ctx, "POST", "/v1/sandboxes", k.Key, api.CreateSandboxRequest{Image: ref})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				pullSt, _, err := tcp.Do(ctx, "POST", "/v1/templates/import", k.Key, api.ImportTemplateRequest{Name: "pulled", Ref: ref})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				// The name of a record no tenant made: the host's, if any.
				rec := "image@sha256:" + strings.Repeat("0", 64)
				st2, r2, err := tcp.Do(ctx, "POST", "/v1/sandboxes", k.Key, api.CreateSandboxRequest{Template: rec})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				ok1 := st1 == 403 && containsStr(r1, "tenant-pulls") || pullSt != 403 && st1 == 502 && containsStr(r1, "registry_unreachable")
				return attack.Judged(ok1 && st2 == 404, "create from %s: %d %s; from record %s: %d %s", ref,
					st1, attack.Clip(attack.OneLine(r1), 70), attack.Clip(rec, 19), st2, attack.Clip(attack.OneLine(r2), 70))
			}),
	}
}

func uploadTemplate(ctx ctxT, tcp *attack.RawClient, key, tname string, archive []byte) (int, string, error) {
	return tcp.Do(ctx, "PUT", "/v1/templates/"+tname+"/archive", key, io.Reader(bytes.NewReader(archive)))
}

// ZerosLayerImage is a one-layer image whose layer is file, size zero
// bytes (a gzip archive of it is a few KiB however large it unpacks);
// claim, if set, is the diffID its config says the layer has. It returns
// the diffID the config names. The storage attacks and the quota tests
// (internal/engine/templates, test/e2e) build their archives with it.
func ZerosLayerImage(file string, size int, claim string) (v1.Image, string, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: file, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)}); err != nil {
		return nil, "", err
	}
	if _, err := tw.Write(make([]byte, size)); err != nil {
		return nil, "", err
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, "", err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, "", err
	}
	if claim != "" {
		cfg = cfg.DeepCopy()
		if cfg.RootFS.DiffIDs[0], err = v1.NewHash(claim); err != nil {
			return nil, "", err
		}
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			return nil, "", err
		}
	}
	return img, cfg.RootFS.DiffIDs[0].String(), nil
}

// GzipDockerSave is img as a gzip-compressed docker-save tarball.
func GzipDockerSave(img v1.Image) ([]byte, error) {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if err := tarball.Write(name.MustParseReference("selftest.invalid/storage:1").(name.Tag), img, zw); err != nil {
		return nil, fmt.Errorf("write the archive: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
