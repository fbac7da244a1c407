package sandbox

import "testing"

func TestImageTag(t *testing.T) {
	for _, tc := range []struct{ task, rev, want string }{
		{"hello", "0123456789abcdef", "proctor-task/hello:0123456789ab"},
		{"Nested/Task_Name.v2", "ABCDEF", "proctor-task/nested/task-name-v2:abcdef"},
		{"--weird--//x", "1", "proctor-task/weird/x:1"},
		{"", "1", "proctor-task/x:1"},
	} {
		if got := ImageTag(tc.task, tc.rev); got != tc.want {
			t.Errorf("ImageTag(%q, %q) = %q, want %q", tc.task, tc.rev, got, tc.want)
		}
	}
}
