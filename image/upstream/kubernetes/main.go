// Command hyperkube is nodecore's one multicall binary for the Kubernetes
// components, built from the k8s.io/kubernetes Go module (see
// image/upstream/mod.ts). The components share most of their code, so one
// binary is far smaller than six.
//
// The component is named by the name the binary is called under (a symlink
// such as kubelet -> hyperkube) or, failing that, by the first argument:
//
//	hyperkube kube-apiserver --etcd-servers=...
//	kubectl get nodes            (kubectl -> hyperkube)
//
// Only the selected component's command is constructed: their constructors
// do global set-up (flags, registries, signal handling).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones (apiserver, controller-manager)

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// servers are the long-running components, run as their own main does.
var servers = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kube-proxy":              proxy.NewProxyCommand,
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if name != "kubectl" && servers[name] == nil {
		if len(args) == 0 {
			usage()
		}
		name, args = args[0], args[1:]
	}
	// Every component reads os.Args itself (cobra, kubectl's plugin
	// handling), so it sees the command line its own binary would.
	os.Args = append([]string{name}, args...)
	if name == "kubectl" {
		// As cmd/kubectl does: verbosity first, so that klog works while the
		// command (plugins, .kuberc) is built.
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
		command := kubectl.NewDefaultKubectlCommand()
		if err := cli.RunNoErrOutput(command); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	newCommand := servers[name]
	if newCommand == nil {
		usage()
	}
	os.Exit(cli.Run(newCommand()))
}

func usage() {
	names := []string{"kubectl"}
	for name := range servers {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: hyperkube COMPONENT [flags]; components: %v\n", names)
	os.Exit(2)
}
