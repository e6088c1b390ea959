// A vCenter simulator for the esx controller's tests: govmomi's simulator package (the engine
// of its vcsim command) behind a few flags, so it builds from the distribution's govmomi source
// without the module proxy.
//
// It prints one line, the SDK URL, once it listens, and serves until SIGTERM or SIGINT.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/vmware/govmomi/simulator"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	username := flag.String("username", "user", "the only user name accepted at login")
	password := flag.String("password", "pass", "its password")
	certFile := flag.String("tls-cert", "", "PEM serving certificate (plain HTTP without one)")
	keyFile := flag.String("tls-key", "", "PEM key of -tls-cert")
	hosts := flag.Int("hosts", 2, "ESX hosts in the one cluster")
	machines := flag.Int("vms", 2, "virtual machines in the cluster")
	noGuestShutdown := flag.Bool("no-guest-shutdown", false,
		"refuse ShutdownGuest on every VM (MethodDisabled), as a guest that cannot be asked")
	flag.Parse()

	model := simulator.VPX()
	model.Host = 0
	model.ClusterHost = *hosts
	model.Machine = *machines
	if err := model.Create(); err != nil {
		fmt.Fprintln(os.Stderr, "vcsim: create model:", err)
		os.Exit(1)
	}
	if *noGuestShutdown {
		for _, vm := range simulator.Map.All("VirtualMachine") {
			vm.Entity().DisabledMethod = append(vm.Entity().DisabledMethod, "ShutdownGuest")
		}
	}
	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*username, *password)}
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vcsim: load certificate:", err)
			os.Exit(1)
		}
		model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	server := model.Service.NewServer()
	defer server.Close()
	u := *server.URL
	u.User = nil
	fmt.Println(u.String())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
