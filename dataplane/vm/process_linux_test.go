package vm

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// parentEnv makes the test binary a parent that starts `sleep` with Start
// or StartTied, prints its pid and waits to be killed.
const parentEnv = "HAMASTER_VM_TEST_PARENT"

func TestMain(m *testing.M) {
	if mode := os.Getenv(parentEnv); mode != "" {
		start := Start
		if mode == "tied" {
			start = StartTied
		}
		p, err := start("sleep", []string{"60"}, filepath.Join(os.Getenv("LOGDIR"), mode+".log"))
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(p.Pid())
		select {}
	}
	os.Exit(m.Run())
}

// TestStartTiedDiesWithItsParent: a tied process goes when its parent is
// SIGKILLed; a plain one (a local replica) outlives it.
func TestStartTiedDiesWithItsParent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode      string
		wantAlive bool
	}{{"tied", false}, {"plain", true}} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			parent := exec.Command(os.Args[0], "-test.run=^$")
			parent.Env = append(os.Environ(), parentEnv+"="+tc.mode, "LOGDIR="+t.TempDir())
			out, err := parent.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				_ = parent.Process.Kill()
				t.Fatalf("parent: %v", err)
			}
			child, err := strconv.Atoi(line[:len(line)-1])
			if err != nil {
				_ = parent.Process.Kill()
				t.Fatalf("parent said %q", line)
			}
			t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
			_ = parent.Process.Kill()
			_ = parent.Wait()
			// The child is not ours to wait for: poll its state. A tied
			// child is gone within milliseconds; a plain one must still
			// run a second later.
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			end := time.Now().Add(time.Second)
			if !tc.wantAlive {
				end = time.Now().Add(5 * time.Second)
			}
			for time.Now().Before(end) {
				if alive := processAlive(child); !alive {
					if tc.wantAlive {
						t.Fatalf("plain child %d died with its parent", child)
					}
					return
				}
				<-tick.C
			}
			if !tc.wantAlive {
				t.Fatalf("tied child %d alive 5s after its parent's SIGKILL", child)
			}
		})
	}
}

// processAlive: the pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z'
		}
	}
	return true
}
