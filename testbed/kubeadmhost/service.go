package kubeadmhost

import (
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Service is a process supervised as systemd supervises a unit with
// Restart=always (kubeadm's kubelet.service): started again Delay after
// it exits, at once on Restart, stopped by Close.
type Service struct {
	name    string
	argv    []string
	logPath string
	delay   time.Duration
	log     *slog.Logger

	kick chan struct{} // restart now
	stop chan struct{}
	done chan struct{}

	mu        sync.Mutex
	proc      *os.Process
	immediate bool
	stopping  bool
	starts    int
}

// StartService starts argv as service name, its output appended to
// logPath, restarted delay after it exits (0: DefaultKubeletRestartDelay);
// log (nil: discard) gets its starts and exits.
func StartService(name string, argv []string, logPath string, delay time.Duration, log *slog.Logger) *Service {
	if delay <= 0 {
		delay = DefaultKubeletRestartDelay
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{name: name, argv: argv, logPath: logPath, delay: delay, log: log,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *Service) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		s.starts++
		s.mu.Unlock()
		s.runOnce()
		s.mu.Lock()
		s.proc = nil
		stopping, immediate := s.stopping, s.immediate
		s.immediate = false
		s.mu.Unlock()
		if stopping {
			return
		}
		if immediate {
			continue
		}
		t := time.NewTimer(s.delay)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-s.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

func (s *Service) runOnce() {
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		s.log.Error("service log", "service", s.name, "err", err)
		return
	}
	defer logf.Close()
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	// The test bed killed without its teardown takes the service (and so
	// a kubelet's pods) with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	err = cmd.Start()
	if err == nil {
		s.proc = cmd.Process
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Error("service start", "service", s.name, "err", err)
		return
	}
	s.log.Debug("service started", "service", s.name, "pid", cmd.Process.Pid)
	err = cmd.Wait()
	s.log.Debug("service exited", "service", s.name, "err", err)
}

// Running reports whether the service's process runs now.
func (s *Service) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Restart stops the running process (SIGTERM) and starts it again at
// once (systemctl restart).
func (s *Service) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.immediate = true
	if s.proc != nil {
		_ = s.proc.Signal(syscall.SIGTERM)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Close stops the service (systemctl stop): SIGTERM, SIGKILL after wait.
// Calling it again waits for the first stop.
func (s *Service) Close(wait time.Duration) {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.stop)
	}
	if s.proc != nil {
		_ = s.proc.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.done:
		return
	case <-t.C:
	}
	s.mu.Lock()
	if s.proc != nil {
		s.log.Warn("service did not stop; killing it", "service", s.name, "after", wait)
		_ = s.proc.Kill()
	}
	s.mu.Unlock()
	<-s.done
}
