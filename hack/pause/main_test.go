package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv makes the test binary act as qvirt-pause with a child of its own that exits at once.
const childEnv = "QVIRT_PAUSE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "exit 3"}, &os.ProcAttr{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(p.Pid)
		main()
		return
	}
	os.Exit(m.Run())
}

// procState is the state letter in /proc/PID/stat, "" once the process is gone.
func procState(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}

func TestPauseReapsAndExitsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=1")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		child, _ := strconv.Atoi(strings.TrimSpace(line))
		deadline := time.Now().Add(5 * time.Second)
		for procState(child) != "" {
			if time.Now().After(deadline) {
				t.Fatalf("child %d of pause is still there in state %s: not reaped", child, procState(child))
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("pause (pid %d) reaped its exited child %d", cmd.Process.Pid, child)
		if procState(cmd.Process.Pid) == "" {
			t.Fatal("pause exited by itself")
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("pause after %v: %v", sig, err)
			}
			t.Logf("pause exited 0 on %v", sig)
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("pause ignored %v", sig)
		}
	}
}
