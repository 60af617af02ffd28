package kubeadm

import (
	"slices"
	"strings"
	"testing"
)

func TestBlockingBudgets(t *testing.T) {
	t.Parallel()
	const pdbs = `{"items":[
 {"metadata":{"namespace":"default","name":"web"},"spec":{"selector":{"matchLabels":{"app":"web"}}},"status":{"disruptionsAllowed":0,"currentHealthy":1,"desiredHealthy":1}},
 {"metadata":{"namespace":"default","name":"api"},"spec":{"selector":{"matchLabels":{"app":"api"}}},"status":{"disruptionsAllowed":1,"currentHealthy":3,"desiredHealthy":2}},
 {"metadata":{"namespace":"other","name":"web"},"spec":{"selector":{"matchLabels":{"app":"web"}}},"status":{"disruptionsAllowed":0}},
 {"metadata":{"namespace":"default","name":"none"},"spec":{},"status":{"disruptionsAllowed":0}},
 {"metadata":{"namespace":"quiet","name":"all"},"spec":{"selector":{}},"status":{"disruptionsAllowed":0,"currentHealthy":2,"desiredHealthy":2}},
 {"metadata":{"namespace":"default","name":"expr"},"spec":{"selector":{"matchExpressions":[{"key":"tier","operator":"In","values":["db"]}]}},"status":{"disruptionsAllowed":0,"currentHealthy":0,"desiredHealthy":1}}]}`
	pod := func(ns, name, labels, extra string) string {
		return `{"metadata":{"namespace":"` + ns + `","name":"` + name + `","labels":` + labels + extra + `}}`
	}
	tests := []struct {
		name string
		pods []string
		want []string
	}{
		{"a pod its budget holds", []string{pod("default", "web-1", `{"app":"web"}`, "")},
			[]string{"pod default/web-1 is held by PodDisruptionBudget default/web (0 disruptions allowed: 1 healthy, 1 desired)"}},
		{"a budget that allows a disruption", []string{pod("default", "api-1", `{"app":"api"}`, "")}, nil},
		{"a budget of another namespace", []string{pod("kube-system", "web-1", `{"app":"web"}`, "")}, nil},
		{"a match expression", []string{pod("default", "db-0", `{"tier":"db"}`, "")},
			[]string{"pod default/db-0 is held by PodDisruptionBudget default/expr (0 disruptions allowed: 0 healthy, 1 desired)"}},
		{"a static pod's mirror", []string{pod("default", "web-m", `{"app":"web"}`, `,"annotations":{"kubernetes.io/config.mirror":"x"}`)}, nil},
		{"a DaemonSet's pod", []string{pod("default", "web-d", `{"app":"web"}`, `,"ownerReferences":[{"kind":"DaemonSet","name":"d","uid":"u","apiVersion":"apps/v1","controller":true}]`)}, nil},
		{"a pod already going", []string{pod("default", "web-g", `{"app":"web"}`, `,"deletionTimestamp":"2026-01-01T00:00:00Z"`)}, nil},
		{"an empty selector: every pod of its namespace", []string{pod("quiet", "any", `{"x":"y"}`, "")},
			[]string{"pod quiet/any is held by PodDisruptionBudget quiet/all (0 disruptions allowed: 2 healthy, 2 desired)"}},
		{"no pods", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := BlockingBudgets([]byte(pdbs), []byte(`{"items":[`+strings.Join(tc.pods, ",")+`]}`))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
	if _, err := BlockingBudgets([]byte("not json"), []byte(`{}`)); err == nil {
		t.Error("BlockingBudgets of a bad budget list: no error")
	}
}
