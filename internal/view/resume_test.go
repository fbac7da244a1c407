package view_test

import (
	"context"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/internal/view"
)

// TestViewFollowsAResumedRun opens a resumed run's page while its epoch 1
// goes on (its log holds the RunFinished that closed epoch 0): the page
// shows the run going, the resumed cell running, and then the run
// finished with both cells passed. The viewer's follower stopped at the
// first RunFinished and showed the run interrupted for good.
func TestViewFollowsAResumedRun(t *testing.T) {
	t.Parallel()
	_, b := startNATS(t)
	ctx := context.Background()
	r := testutil.NewResumedRun("agent:h0", t.TempDir())
	if err := b.PutRun(ctx, r.Record); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx, r.Before...); err != nil {
		t.Fatal(err)
	}
	srv := startView(t, b, view.Config{Version: "test"})
	var rp view.RunPage
	if code := getJSON(t, srv.URL+"/runs/"+r.ID+".json", &rp); code != 200 || rp.Finished || rp.States["running"] != 1 || rp.States["passed"] != 1 {
		t.Fatalf("the resumed run while epoch 1 goes: %d finished %v states %v", code, rp.Finished, rp.States)
	}
	if err := b.PublishAll(ctx, r.After...); err != nil {
		t.Fatal(err)
	}
	if err := b.PutRun(ctx, r.Final); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		rp = view.RunPage{}
		if code := getJSON(t, srv.URL+"/runs/"+r.ID+".json", &rp); code == 200 && rp.Finished && rp.States["passed"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed the resumed run's end: finished %v states %v", rp.Finished, rp.States)
		}
		time.Sleep(50 * time.Millisecond) // polling the page, as its script does
	}
	if rp.Record.Status != "finished" || rp.Summary["agent:h0"] == nil || rp.Summary["agent:h0"].Passed != 2 {
		t.Errorf("finished page: status %s summary %+v", rp.Record.Status, rp.Summary["agent:h0"])
	}
}

// TestViewReopensARunResumedLater: a run the viewer showed ended
// (interrupted, its projection cached) and that is resumed afterwards is
// followed again: the page shows its resumed epoch to the end.
func TestViewReopensARunResumedLater(t *testing.T) {
	t.Parallel()
	_, b := startNATS(t)
	ctx := context.Background()
	r := testutil.NewResumedRun("agent:h0", t.TempDir())
	ended := r.Record
	ended.Status, ended.Epoch = "interrupted", 0
	if err := b.PutRun(ctx, ended); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx, r.Before[:len(r.Before)-1]...); err != nil { // up to epoch 0's RunFinished
		t.Fatal(err)
	}
	srv := startView(t, b, view.Config{Version: "test"})
	var rp view.RunPage
	if code := getJSON(t, srv.URL+"/runs/"+r.ID+".json", &rp); code != 200 || !rp.Finished || rp.States["errored"] != 1 {
		t.Fatalf("the interrupted run: %d finished %v states %v", code, rp.Finished, rp.States)
	}
	if err := b.PutRun(ctx, r.Record); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx, append(r.Before[len(r.Before)-1:], r.After...)...); err != nil {
		t.Fatal(err)
	}
	if err := b.PutRun(ctx, r.Final); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		rp = view.RunPage{}
		if code := getJSON(t, srv.URL+"/runs/"+r.ID+".json", &rp); code == 200 && rp.Finished && rp.States["passed"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed the resumed epoch: finished %v states %v", rp.Finished, rp.States)
		}
		time.Sleep(50 * time.Millisecond) // polling the page, as its script does
	}
}
