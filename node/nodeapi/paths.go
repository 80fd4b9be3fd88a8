package nodeapi

import (
	"fmt"
	"net/url"
)

// Paths are /v1/namespaces/{namespace}/vmis/{name}/{op}.
func vmiPath(vmi VMI, op string) string {
	return fmt.Sprintf("/v1/namespaces/%s/vmis/%s/%s", url.PathEscape(vmi.Namespace), url.PathEscape(vmi.Name), op)
}

const (
	routeCommand     = "PUT /v1/namespaces/{namespace}/vmis/{name}/{command}"
	routeConsole     = "GET /v1/namespaces/{namespace}/vmis/{name}/console"
	routeVNC         = "GET /v1/namespaces/{namespace}/vmis/{name}/vnc"
	routeScreenshot  = "GET /v1/namespaces/{namespace}/vmis/{name}/screenshot"
	routeGuestAgent  = "GET /v1/namespaces/{namespace}/vmis/{name}/guestagent"
	routePortForward = "GET /v1/namespaces/{namespace}/vmis/{name}/portforward/{port}/{protocol}"
	routeVSOCK       = "GET /v1/namespaces/{namespace}/vmis/{name}/vsock/{port}"
)
