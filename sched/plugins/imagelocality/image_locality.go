// Package imagelocality implements Kubernetes' ImageLocality score: prefer nodes that already hold the
// pod's images (node.status.images), weighing each image by its size and by how widely it is spread
// (an image on every node says nothing about this one):
//
//	sum   = Σ over the pod's (init) containers whose image the node holds of size × nodesWithImage / allNodes
//	score = 100 × (clamp(sum, 23 MiB, 1000 MiB × containers) − 23 MiB) / (1000 MiB × containers − 23 MiB)
//
// Image names are compared after adding ":latest" to untagged names, as kube-scheduler does (no
// registry or digest normalisation beyond that).
package imagelocality

import (
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "ImageLocality"

// kube-scheduler's thresholds.
const (
	mb                    int64 = 1024 * 1024
	minThreshold                = 23 * mb
	maxContainerThreshold       = 1000 * mb
)

const stateKey framework.StateKey = "PreScore" + Name

var statusSkip = framework.NewStatus(framework.Skip)

// ImageLocality is the plugin.
type ImageLocality struct{}

var (
	_ framework.PreScorePlugin = &ImageLocality{}
	_ framework.ScorePlugin    = &ImageLocality{}
)

// New returns the plugin.
func New() *ImageLocality { return &ImageLocality{} }

// Name implements framework.Plugin.
func (*ImageLocality) Name() string { return Name }

type image struct {
	name   string  // normalised
	spread float64 // nodes holding it / all nodes
}

type preScoreState struct {
	images        []image
	numContainers int
}

// PreScore normalises the pod's image names and looks up their spread once; it skips the plugin when
// no node holds any of them (every node would score 0).
func (*ImageLocality) PreScore(state *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	snap := state.Snapshot()
	spec := pod.Pod.GetSpec()
	var images []image // allocated only when some node holds an image of the pod
	for _, cs := range [2][]*pb.Container{spec.GetInitContainers(), spec.GetContainers()} {
		for _, c := range cs {
			name := framework.NormalizedImageName(c.GetImage())
			if n := snap.ImageNumNodes(name); n > 0 {
				images = append(images, image{name: name, spread: float64(n) / float64(snap.NumNodes())})
			}
		}
	}
	if len(images) == 0 {
		return statusSkip
	}
	state.Write(stateKey, &preScoreState{images: images, numContainers: len(spec.GetInitContainers()) + len(spec.GetContainers())})
	return nil
}

// Score implements framework.ScorePlugin.
func (*ImageLocality) Score(state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	s, st := framework.ReadState[*preScoreState](state, stateKey)
	if st != nil {
		return 0, st
	}
	var sum int64
	for _, img := range s.images {
		if size, ok := node.ImageSizes[img.name]; ok {
			sum += int64(float64(size) * img.spread)
		}
	}
	return calculatePriority(sum, s.numContainers), nil
}

func calculatePriority(sum int64, numContainers int) int64 {
	maxThreshold := maxContainerThreshold * int64(numContainers)
	sum = min(max(sum, minThreshold), maxThreshold)
	return framework.MaxNodeScore * (sum - minThreshold) / (maxThreshold - minThreshold)
}
