package harness

import (
	"reflect"
	"slices"
	"testing"
)

// TestOwnersBack: only the files the tree held before get their owners
// back: edited in place (same inode) yes; a file the agent put in a
// path's place, or a hard link to a file elsewhere (another inode), no;
// a new path, no. Where the inodes changed (the root's did), a file with
// as many links as before and a directory by its path get them back, a
// file whose link count rose does not.
func TestOwnersBack(t *testing.T) {
	before := map[string]owned{
		".":         {ino: "1", owner: "0:0"},
		"./edited":  {ino: "2", links: "1", owner: "0:0"},
		"./swapped": {ino: "3", links: "1", owner: "4242:4242"},
		"./linked":  {ino: "4", links: "1", owner: "4242:4242"},
		"./same":    {ino: "5", links: "1", owner: "10001:10001"},
		"./dir":     {ino: "6", owner: "0:0"},
	}
	now := map[string]owned{
		".":         {ino: "1", owner: "10001:10001"},
		"./edited":  {ino: "2", links: "1", owner: "10001:10001"},
		"./swapped": {ino: "9", links: "1", owner: "10001:10001"},
		"./linked":  {ino: "70", links: "2", owner: "0:42"},
		"./same":    {ino: "5", links: "1", owner: "10001:10001"},
		"./dir":     {ino: "6", owner: "10001:10001"},
		"./new":     {ino: "10", links: "1", owner: "10001:10001"},
	}
	got, n := ownersBack(before, now)
	want := map[string][]string{"0:0": {".", "./dir", "./edited"}}
	sortAll(got)
	if n != 3 || !reflect.DeepEqual(got, want) {
		t.Errorf("stable inodes: %v (%d), want %v", got, n, want)
	}
	// Inodes not kept: every file has a new one.
	unstable := map[string]owned{}
	for p, f := range now {
		f.ino = "x" + f.ino
		unstable[p] = f
	}
	got, n = ownersBack(before, unstable)
	sortAll(got)
	want = map[string][]string{"0:0": {".", "./dir", "./edited"}, "4242:4242": {"./swapped"}}
	if n != 4 || !reflect.DeepEqual(got, want) {
		t.Errorf("inodes not kept: %v (%d), want %v", got, n, want)
	}
}

func sortAll(m map[string][]string) {
	for k := range m {
		slices.Sort(m[k])
	}
}
