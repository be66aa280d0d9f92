package kube_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/mgmt"
)

// TestNetworkVolumeGrowsItsClaim: growing a network volume through the
// API grows its bound claim where the storage class allows expansion; a
// claim the cluster will not grow (no class: a pre-provisioned volume; a
// class without allowVolumeExpansion) refuses the resize with a 400 on
// size saying why, and the volume and its claim keep their size.
func TestNetworkVolumeGrowsItsClaim(t *testing.T) {
	cases := []struct {
		name   string
		class  bool // Berth names a storage class
		expand bool // the class allows volume expansion
		want   int  // HTTP status of the resize
	}{
		{"class allows expansion", true, true, 200},
		{"class without expansion", true, false, 400},
		{"no class", false, false, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			if c.class {
				sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "grow-" + e.ns.Name},
					Provisioner: "berth.test/none", AllowVolumeExpansion: &c.expand}
				if _, err := e.c.AdminClient.StorageV1().StorageClasses().Create(e.ctx, sc, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = e.c.AdminClient.StorageV1().StorageClasses().Delete(e.ctx, sc.Name, metav1.DeleteOptions{})
				})
				e.class = sc.Name
			}
			e.start()
			var vol idOnly
			e.call("POST", "/v1/networkvolumes", map[string]any{"name": "data", "size": 20, "dataCenterId": mgmt.DataCenterID}, 200, &vol)
			tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
			ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
				"workersMin": 1, "workersMax": 1, "networkVolumeId": vol.ID})
			e.newPod(ep, nil, false) // its claim is made before it
			claims := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name)
			name := "berth-vol-" + strings.ToLower(vol.ID)
			var pvc *corev1.PersistentVolumeClaim
			e.eventually("claim "+name+" bound", func() bool {
				var err error
				pvc, err = claims.Get(e.ctx, name, metav1.GetOptions{})
				return err == nil && pvc.Status.Phase == corev1.ClaimBound
			}, func() string { return pvc.String() })

			body := e.call("PATCH", "/v1/networkvolumes/"+vol.ID, map[string]any{"size": 30}, c.want, nil)
			wantGB := 30
			if c.want != 200 {
				wantGB = 20
				t.Logf("refused: %s", body)
				if s := string(body); !strings.Contains(s, "size") || !strings.Contains(s, "cluster refuses") {
					t.Errorf("refused resize says %s, want the cluster's refusal on size", s)
				}
			}
			var got struct {
				Size int `json:"size"`
			}
			e.call("GET", "/v1/networkvolumes/"+vol.ID, nil, 200, &got)
			if got.Size != wantGB {
				t.Errorf("volume size %d GB after the resize, want %d", got.Size, wantGB)
			}
			pvc, err := claims.Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if q, want := pvc.Spec.Resources.Requests[corev1.ResourceStorage], resource.NewQuantity(int64(wantGB)<<30, resource.BinarySI); q.Cmp(*want) != 0 {
				t.Errorf("claim requests %s, want %s", q.String(), want.String())
			}
		})
	}
}
