// Command kube-network-policies is nodecore's NetworkPolicy enforcer on a
// worker: the controller of sigs.k8s.io/kube-network-policies
// (pkg/networkpolicy), started the way a nodecore node runs a Kubernetes
// component. Upstream's own main (cmd/, v0.8.0) cannot be used as it is:
//
//   - it reads only in-cluster ServiceAccount credentials, and a node's
//     enforcer is no pod: it runs as the node's process with a client
//     certificate in a kubeconfig (--kubeconfig);
//   - it stops on SIGINT only, and a node stops its services with SIGTERM;
//   - it has no readiness: here /readyz answers once the informers have
//     listed pods, namespaces and policies, so the node reports the
//     enforcer running only when its rules can say something.
//
// Only NetworkPolicy is enforced; the AdminNetworkPolicy APIs (alpha, not
// served by nodecore's apiserver) stay off.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig with the enforcer's client certificate (required)")
	nodeName := flag.String("node-name", "", "the Node this enforcer runs on: its pods' rules are written here (required)")
	listen := flag.String("listen", "127.0.0.1:10254", "host:port of /readyz and /metrics")
	queueID := flag.Int("nfqueue-id", 100, "the nfqueue that new connections of selected pods are sent to")
	failOpen := flag.Bool("fail-open", false, "accept packets while no enforcer reads the queue (default: drop them)")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*kubeconfig, *nodeName, *listen, *queueID, *failOpen); err != nil {
		fmt.Fprintf(os.Stderr, "kube-network-policies: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, nodeName, listen string, queueID int, failOpen bool) error {
	if kubeconfig == "" || nodeName == "" {
		return errors.New("--kubeconfig and --node-name are required")
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	// Pods are most of what it watches: protobuf is the cheaper encoding.
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	config.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := networkpolicy.NewController(
		client,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{FailOpen: failOpen, QueueID: queueID, NodeName: nodeName, NetfilterBug1766Fix: true},
	)
	if err != nil {
		return err
	}

	var synced atomic.Bool
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced.Load() {
			http.Error(w, "the informers have not listed pods, namespaces and policies yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	server := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.ListenAndServe() }()

	runErr := make(chan error, 1)
	go func() { runErr <- controller.Run(ctx) }()
	factory.Start(ctx.Done())
	for informer, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil // stopped while it listed
			}
			return fmt.Errorf("the %v informer did not sync", informer)
		}
	}
	synced.Store(true)
	klog.InfoS("enforcing NetworkPolicy", "node", nodeName, "queue", queueID, "failOpen", failOpen)

	select {
	case <-ctx.Done():
	case err = <-runErr:
	case err = <-serveErr:
	}
	stop()
	// The controller removes its table as it returns: wait for that, briefly.
	select {
	case runResult := <-runErr:
		if err == nil {
			err = runResult
		}
	case <-time.After(5 * time.Second):
	}
	shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = server.Shutdown(shutdown)
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
