// cert-manager's controller from its root module's own packages, behind a main of ours: the release's binary is a
// module of its own (cmd/controller) that the module proxy does not serve, but its controllers live in the root
// module's public packages and register themselves. Linked here: the Certificate controllers, the Issuer and
// ClusterIssuer controllers, the CertificateRequest approver, and the CA and self-signed issuers (no ACME, Vault or
// Venafi: a sandbox reaches none of them).
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig of the API server")
	namespace := flag.String("cluster-resource-namespace", "cert-manager", "where a ClusterIssuer's Secrets are")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	opts := controllerpkg.ContextOptions{Kubeconfig: *kubeconfig, KubernetesAPIQPS: 50, KubernetesAPIBurst: 100}
	opts.ClusterResourceNamespace = *namespace
	opts.CertificateRequestMinimumBackoffDuration = time.Second
	opts.CertificateRequestMaximumBackoffDuration = 30 * time.Second
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		log.Fatal(err)
	}
	var running []controllerpkg.Interface
	for name, build := range controllerpkg.Known() {
		c, err := build(factory)
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		running = append(running, c)
	}
	base, err := factory.Build()
	if err != nil {
		log.Fatal(err)
	}
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.SharedInformerFactory.Start(ctx.Done())
	for _, c := range running {
		go func(c controllerpkg.Interface) { _ = c.Run(2, ctx) }(c)
	}
	<-ctx.Done()
}
