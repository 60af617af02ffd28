package vpc_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/vpc/vpctest"
)

// helper modes, run inside a namespace by re-executing the test binary.
const helperEnv = "HAMASTER_VPC_HELPER"

// TestMain runs the helper when asked: "serve" answers every connection
// on :7000 with its hostname file's view of "vm-a"; "dial HOST:PORT"
// resolves through the namespace's /etc/hosts and prints the answer.
func TestMain(m *testing.M) {
	switch mode := os.Getenv(helperEnv); {
	case mode == "serve":
		ln, err := net.Listen("tcp", ":7000")
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(0)
			}
			fmt.Fprintf(c, "hello from %s\n", c.LocalAddr())
			c.Close()
		}
	case strings.HasPrefix(mode, "dial "):
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(mode, "dial "), 2*time.Second)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Print(line)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestVPCReachability(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := vpctest.New(ctx, t, "t")
	a, err := v.AddVM(ctx, "vm-a", netip.MustParseAddr("10.128.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.AddVM(ctx, "vm-b", netip.MustParseAddr("10.128.0.3")); err != nil {
		t.Fatal(err)
	}
	ext := v.External(10)
	if err := v.SetExternal(ctx, ext, "vm-a"); err != nil {
		t.Fatal(err)
	}
	srv, err := v.Command(ctx, "vm-a", os.Args[0], "-test.run=^$")
	if err != nil {
		t.Fatal(err)
	}
	srv.Env = append(os.Environ(), helperEnv+"=serve")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("helper in %s: %q", a.NS, line)
	}

	// VM to VM by hostname, over the bridge.
	dial, err := v.Command(ctx, "vm-b", os.Args[0], "-test.run=^$")
	if err != nil {
		t.Fatal(err)
	}
	dial.Env = append(os.Environ(), helperEnv+"=dial vm-a:7000")
	got, err := dial.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "hello from 10.128.0.2:7000") {
		t.Fatalf("vm-b → vm-a:7000 = %q, %v", got, err)
	}

	// The operator reaches the external address, not the internal one.
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ext.String(), "7000"), 2*time.Second)
	if err != nil {
		t.Fatalf("operator → external %v: %v", ext, err)
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if !strings.Contains(line, ext.String()) {
		t.Errorf("operator → external answered %q", line)
	}
	// No packet is sent to an internal address from here (this namespace
	// may have a default route off the machine): the kernel's route for
	// it must not lead into the VPC.
	if routed, r := v.Routed(netip.MustParseAddr("10.128.0.2")); routed {
		t.Fatalf("the operator's namespace routes a VM's internal address into the VPC: %s", r)
	}
	if routed, r := v.Routed(ext); !routed {
		t.Fatalf("the external address is not routed into the VPC: %s", r)
	}

	// The address moves to the router (a load balancer's), then is gone.
	if err := v.SetExternal(ctx, ext, ""); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(ext.String(), "7000"), 500*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("vm-a still answers on an external address it gave up")
	}
	if err := v.RemoveVM(ctx, "vm-b"); err != nil {
		t.Fatal(err)
	}
}
