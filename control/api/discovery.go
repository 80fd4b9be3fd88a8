package api

import (
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qvirt/qvirt/internal/version"
)

// GroupName is the API group of the subresources.
const GroupName = "subresources.kubevirt.io"

// subresources lists what the APIResourceList advertises, with the verb RBAC checks for each
// (PUT is update, GET is get). KubeVirt lists no verbs; they are given here so that discovery
// tells what a role must grant.
var subresources = []struct{ name, verb string }{
	{"virtualmachines/start", "update"}, {"virtualmachines/stop", "update"}, {"virtualmachines/restart", "update"},
	{"virtualmachines/migrate", "update"}, {"virtualmachines/portforward", "get"},
	{"virtualmachines/addvolume", "update"}, {"virtualmachines/removevolume", "update"},
	{"virtualmachines/memorydump", "update"}, {"virtualmachines/removememorydump", "update"},
	{"virtualmachineinstances/console", "get"}, {"virtualmachineinstances/vnc", "get"},
	{"virtualmachineinstances/vnc/screenshot", "get"}, {"virtualmachineinstances/portforward", "get"},
	{"virtualmachineinstances/pause", "update"}, {"virtualmachineinstances/unpause", "update"},
	{"virtualmachineinstances/softreboot", "update"}, {"virtualmachineinstances/reset", "update"},
	{"virtualmachineinstances/guestosinfo", "get"}, {"virtualmachineinstances/userlist", "get"},
	{"virtualmachineinstances/filesystemlist", "get"}, {"virtualmachineinstances/vsock", "get"},
	{"virtualmachineinstances/addvolume", "update"}, {"virtualmachineinstances/removevolume", "update"},
}

func apiGroup() *metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: GroupName + "/v1", Version: "v1"}
	return &metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             GroupName,
		Versions:         []metav1.GroupVersionForDiscovery{gv},
		PreferredVersion: gv,
	}
}

func apiResourceList() *metav1.APIResourceList {
	l := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: GroupName + "/v1"}
	for _, r := range subresources {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: r.name, Namespaced: true, Verbs: metav1.Verbs{r.verb}})
	}
	return l
}

func (s *Server) discoveryGroup(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, apiGroup())
}

func (s *Server) discoveryVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, apiResourceList())
}

func (s *Server) version(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, version.Get()) }

// healthz reports whether the Kubernetes API answers, as KubeVirt's does.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if _, err := s.opts.Clients.Kube().Discovery().RESTClient().Get().AbsPath("/version").Do(r.Context()).Raw(); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"apiserver": "disconnected", "error": err.Error()})
		return
	}
	writeJSON(w, 200, map[string]string{"apiserver": "ok", "restful": "ok"})
}
