// Package slowfile is for tests of reads that must give up when their
// context ends: it turns a file into a named pipe that serves its bytes
// as a very slow disk would, never to the end. It must not be used
// outside tests.
package slowfile

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// Replace turns the file at path into a named pipe whose reader gets
// the first half of the file's bytes at once and the rest a byte every
// 10 ms, never the last byte, for as long as the test lasts. The channel
// is closed once the reader has taken (nearly all of) the first half.
// Linux and other systems with named pipes only.
func Replace(t testing.TB, path string) <-chan struct{} {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	half := make(chan struct{})
	go func() {
		f := openWriter(path, done)
		if f == nil {
			return
		}
		go func() { <-done; f.Close() }() // ends a Write in progress
		if _, err := f.Write(data[:len(data)/2]); err != nil {
			return
		}
		close(half)
		for j := len(data) / 2; j < len(data)-1; j++ {
			if _, err := f.Write(data[j : j+1]); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return half
}

// openWriter opens the pipe for writing once a reader has it open (a
// blocking open could not be given up), or returns nil once done closes.
func openWriter(path string, done <-chan struct{}) *os.File {
	for {
		f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			return f
		}
		if !errors.Is(err, syscall.ENXIO) {
			return nil
		}
		select {
		case <-done:
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// StopMidway is a test of a stop during a slow read: it runs op, waits
// until midway is closed (the read has begun; op ending first, or a
// minute without it, fails the test), calls stop and returns op's error
// once op has ended (90 s more fails the test).
func StopMidway(t testing.TB, midway <-chan struct{}, op func() error, stop func()) error {
	t.Helper()
	ended := make(chan error, 1)
	go func() { ended <- op() }()
	select {
	case <-midway:
	case err := <-ended:
		t.Fatalf("it ended before the stop: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("nothing began the read within a minute")
	}
	stop()
	select {
	case err := <-ended:
		return err
	case <-time.After(90 * time.Second):
		t.Fatal("it went on for 90 s after the stop")
	}
	return nil
}
