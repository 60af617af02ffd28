//go:build fidelity || gcekubeadm

package main

import "os"

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
