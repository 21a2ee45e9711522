package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/berth-sh/berth/internal/agentsandbox"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/node/kube"
)

// startAgentSandbox starts the agent-sandbox door (--agent-sandbox, with
// --backend kubernetes): its CRDs installed, then reconciled while this
// replica holds the node lease. It returns the function that stops it.
func (d *Daemon) startAgentSandbox(ctx context.Context, authn *auth.Authenticator, log *slog.Logger) (func(), error) {
	kc := d.cfg.Kube
	client, _, rc, err := kube.NewClients(kc.Kubeconfig)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	images, err := parsePairs("--template-image", kc.TemplateImages)
	if err != nil {
		return nil, err
	}
	// An image names the berth template serving it: --image the default
	// template's, --template-image its own.
	templates := map[string]string{kc.Image: d.cfg.DefaultTemplate}
	for tpl, img := range images {
		templates[img] = tpl
	}
	ictx, icancel := context.WithTimeout(ctx, time.Minute)
	defer icancel()
	if err := agentsandbox.InstallCRDs(ictx, dyn); err != nil {
		return nil, fmt.Errorf("--agent-sandbox: %w", err)
	}
	door := agentsandbox.New(agentsandbox.Config{Engine: d.engine, Auth: authn, Audit: d.Server.Audit,
		Dynamic: dyn, Client: client, SandboxNamespace: kc.Namespace, Templates: templates, Log: log,
		Held: func() bool { _, ok := d.leases.node.Held(); return ok }})
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := door.Run(rctx); err != nil {
			log.Error("agent-sandbox door stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}
