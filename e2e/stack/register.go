package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"sigs.k8s.io/yaml"

	"github.com/qvirt/qvirt/internal/localcluster"
)

// RegisterVirtAPI points the virt-api Service at a virt-api listening on loopback port (an
// ExternalName service: the kube-apiserver refuses loopback endpoints, but resolves this one for
// both webhooks and the aggregation layer), then installs deploy/'s webhook configurations and
// APIService with caPEM as their CA bundle, and waits for the APIService to be available.
func RegisterVirtAPI(ctx context.Context, cfg *rest.Config, deployDir string, port int, caPEM []byte) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-api", Namespace: Namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}},
	}
	// Registration replaces what an earlier run left: the port changes from run to run.
	_ = kube.CoreV1().Services(Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{})
	if _, err := kube.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("virt-api service: %w", err)
	}
	docs, err := localcluster.YAMLDocs(filepath.Join(deployDir, "webhooks.yaml"))
	if err != nil {
		return err
	}
	p32 := int32(port)
	for _, d := range docs {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(d, &meta); err != nil {
			return err
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			var m admissionv1.MutatingWebhookConfiguration
			if err := yaml.UnmarshalStrict(d, &m); err != nil {
				return err
			}
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig.CABundle, m.Webhooks[i].ClientConfig.Service.Port = caPEM, &p32
			}
			mc := kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
			_ = mc.Delete(ctx, m.Name, metav1.DeleteOptions{})
			if _, err := mc.Create(ctx, &m, metav1.CreateOptions{}); err != nil {
				return err
			}
		case "ValidatingWebhookConfiguration":
			var v admissionv1.ValidatingWebhookConfiguration
			if err := yaml.UnmarshalStrict(d, &v); err != nil {
				return err
			}
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig.CABundle, v.Webhooks[i].ClientConfig.Service.Port = caPEM, &p32
			}
			vc := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
			_ = vc.Delete(ctx, v.Name, metav1.DeleteOptions{})
			if _, err := vc.Create(ctx, &v, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	asDocs, err := localcluster.YAMLDocs(filepath.Join(deployDir, "apiservice.yaml"))
	if err != nil {
		return err
	}
	var as apiregv1.APIService
	if err := yaml.UnmarshalStrict(asDocs[0], &as); err != nil {
		return err
	}
	as.Spec.CABundle, as.Spec.Service.Port = caPEM, &p32
	agg, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_ = agg.ApiregistrationV1().APIServices().Delete(ctx, as.Name, metav1.DeleteOptions{})
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, &as, metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, as.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiregv1.Available && c.Status == apiregv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}
