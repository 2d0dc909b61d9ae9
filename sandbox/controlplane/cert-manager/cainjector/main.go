// cert-manager's cainjector from its root module's public package (pkg/controller/cainjector) behind a main of ours:
// a controller-runtime manager with the injectors of webhook configurations, APIServices and CRDs.
package main

import (
	"flag"
	"log"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	flag.Parse() // --kubeconfig is controller-runtime's own flag
	ctrl.SetLogger(klog.NewKlogr())
	config := ctrl.GetConfigOrDie()
	config.UserAgent = "cert-manager-cainjector/opsmanager-sandbox" // its apply patches' field manager
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, admissionv1.AddToScheme,
		apiextv1.AddToScheme, apiregv1.AddToScheme, cmscheme.AddToScheme} {
		if err := add(scheme); err != nil {
			log.Fatal(err)
		}
	}
	mgr, err := ctrl.NewManager(config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		log.Fatal(err)
	}
	ctx := ctrl.SetupSignalHandler()
	opts := cainjector.SetupOptions{EnableCertificatesDataSource: true, EnabledReconcilersFor: map[string]bool{
		"mutatingwebhookconfiguration": true, "validatingwebhookconfiguration": true, "apiservice": true,
		"customresourcedefinition": true}}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, opts); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
}
