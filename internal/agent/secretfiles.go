package agent

import (
	"context"
	"encoding/json"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// SecretFiles makes the sandbox's /run/secrets tmpfs hold exactly files,
// each 0400 and owned by owner (a user the agent resolves in the sandbox;
// "" is root): any other file there is overwritten and removed. The
// encoded request is zeroed once sent.
func (c *Client) SecretFiles(ctx context.Context, owner string, files []wire.SecretFile) error {
	return c.SecretFilesCA(ctx, owner, files, nil, nil)
}

// SecretFilesCA is SecretFiles that also writes, when egressCA is not
// empty, wire.EgressCABundle: the image's system CAs (else systemCA, the
// host's) followed by egressCA.
func (c *Client) SecretFilesCA(ctx context.Context, owner string, files []wire.SecretFile, egressCA, systemCA []byte) error {
	b, err := json.Marshal(wire.SecretFiles{Files: files, EgressCA: egressCA, SystemCA: systemCA})
	if err != nil {
		return errdefs.Invalid("encode secret files: %v", err)
	}
	defer clear(b)
	if len(b) > wire.MaxFrameBytes {
		return errdefs.TooLarge("secret files exceed %d bytes", wire.MaxFrameBytes)
	}
	cc, err := c.open(ctx, wire.Request{Op: wire.OpSecretFiles, Owner: owner})
	if err != nil {
		return err
	}
	defer cc.close()
	if err := cc.fw.Send(wire.FrameData, b); err != nil {
		return cc.ioErr(err)
	}
	_, err = cc.expect(wire.FrameEnd)
	return err
}
