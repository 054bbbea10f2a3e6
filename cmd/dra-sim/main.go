// Command dra-sim is a simulated DRA driver: it publishes node-local
// ResourceSlices for kwok nodes from an inventory file, as kubelet plugins
// would on real hardware, until it is interrupted.
//
//	go run ./cmd/dra-sim -kubeconfig /tmp/drastack.kubeconfig -inventory config/samples/sim-inventory.yaml
//
// Once every current node's pools are in the API server it prints one line
// that scripts wait for:
//
//	sim ready: drivers=gpu.sim.drastack.io,... nodes=3 slices=12
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/drastack/drastack/internal/simdriver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dra-sim:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("dra-sim", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (default $KUBECONFIG)")
	inventory := fs.String("inventory", "", "inventory file (required), see internal/simdriver/testdata/inventory.yaml")
	keep := fs.Bool("keep-slices", false, "leave the slices in place on exit instead of deleting them")
	readyTimeout := fs.Duration("ready-timeout", 2*time.Minute, "how long to wait for the first publication")
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *inventory == "" {
		return fmt.Errorf("-inventory is required")
	}
	inv, err := simdriver.LoadInventory(*inventory)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	// One slice controller per node and driver lists, watches and writes:
	// the client default of 5 requests per second would make a 50-node
	// cluster wait a minute.
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := simdriver.Start(ctx, simdriver.Options{Client: client, Inventory: inv, KeepSlicesOnStop: *keep})
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "dra-sim: stop:", err)
		}
	}()

	waitCtx, cancel := context.WithTimeout(ctx, *readyTimeout)
	defer cancel()
	if err := s.WaitPublished(waitCtx); err != nil {
		return err
	}
	drivers := make([]string, len(inv.Drivers))
	for i, d := range inv.Drivers {
		drivers[i] = d.Name
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list slices: %w", err)
	}
	fmt.Printf("sim ready: drivers=%s nodes=%d slices=%d\n", strings.Join(drivers, ","), len(nodes.Items), len(slices.Items))

	<-ctx.Done()
	return nil
}
