package loadtest

import "testing"

func TestParseFlagsDeployments(t *testing.T) {
	tests := []struct {
		args                  []string
		deployments, replicas int
		nodes                 int
		wantErr               bool
	}{
		{[]string{"--scenario", "deployments"}, deploymentsDefault, deploymentReplicasDefault, deploymentsNodesDefault, false},
		{[]string{"--scenario", "deployments", "--deployments", "100", "--replicas", "100", "--nodes", "500"}, 100, 100, 500, false},
		{[]string{"--scenario", "deployments", "--replicas", "1,3"}, 0, 0, 0, true},
		{[]string{"--scenario", "deployments", "--deployments", "0"}, 0, 0, 0, true},
	}
	for _, tc := range tests {
		c, err := ParseFlags(tc.args)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%v: no error", tc.args)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if c.Deployments != tc.deployments || c.DeploymentReplicas != tc.replicas || c.Nodes != tc.nodes {
			t.Errorf("%v: %d deployments × %d on %d nodes", tc.args, c.Deployments, c.DeploymentReplicas, c.Nodes)
		}
	}
}
