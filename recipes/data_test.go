package recipes

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/cuda"
)

func driverKnows(t *testing.T, mm string) bool {
	t.Helper()
	_, err := cuda.MinDriver(mm)
	return err == nil
}

func TestDataEveryRowHasSourceAndConfidence(t *testing.T) {
	files, _ := fs.Glob(dataFS, "data/*.json")
	if len(files) < 4 {
		t.Fatalf("data files: %v", files)
	}
	if DataVersion() != cuda.DataVersion() {
		t.Errorf("data_version %s, cuda's %s: the compatibility data is released as one set", DataVersion(), cuda.DataVersion())
	}
	for _, f := range files {
		b, _ := dataFS.ReadFile(f)
		if err := cuda.CheckDataFile(f, b, DataVersion()); err != nil {
			t.Error(err)
		}
	}
}

func TestDataDates(t *testing.T) {
	db := mustDB()
	for _, d := range []string{db.Torch.DataDate, db.Images.DataDate} {
		if _, err := time.Parse(time.DateOnly, d); err != nil {
			t.Errorf("data_date %q: %v", d, err)
		}
	}
	if db.Date() == "" || db.Origin != OriginEmbedded || db.Version() != DataVersion() {
		t.Errorf("db: date %q origin %q version %q", db.Date(), db.Origin, db.Version())
	}
}

func TestDataTorchCompanions(t *testing.T) {
	for _, r := range mustDB().Torch.Releases {
		if r.TorchvisionPython == "" || !validPyRange(r.TorchvisionPython) || r.TorchvisionPythonSource == "" || !slices.Contains(cuda.Confidences, r.TorchvisionPythonConfidence) {
			t.Errorf("torch %s: torchvision_python %q without a range, source or confidence", r.Minor, r.TorchvisionPython)
		}
		if r.TorchaudioUnsettled && (r.TorchaudioSource == "" || !slices.Contains(cuda.Confidences, r.TorchaudioConfidence)) {
			t.Errorf("torch %s: torchaudio_unsettled without source/confidence", r.Minor)
		}
		if want := fmt.Sprintf("0.%d", cuda.MustVersion(r.Minor)[1]+15); r.TorchvisionMinor != want {
			t.Errorf("torch %s: torchvision_minor %s, the pairing rule says %s", r.Minor, r.TorchvisionMinor, want)
		}
	}
}

func TestDataTorchVariantsKnownToDriverTable(t *testing.T) {
	db := mustDB()
	for _, r := range db.Torch.Releases {
		if len(r.Patches) == 0 || !strings.HasPrefix(r.Patches[0], r.Minor+".") {
			t.Errorf("torch %s: patches %v", r.Minor, r.Patches)
		}
		for _, v := range r.Variants {
			if !driverKnows(t, v.CUDA) {
				t.Errorf("torch %s %s: CUDA %s not in the driver table", r.Minor, v.Name, v.CUDA)
			}
			if cudaVariant(v.CUDA) != v.Name {
				t.Errorf("torch %s: variant %s has cuda %s", r.Minor, v.Name, v.CUDA)
			}
			if v.CuDNN == "" || v.Archs == "" || !slices.Contains(cuda.Confidences, v.ArchsConfidence) {
				t.Errorf("torch %s %s: missing cudnn/archs", r.Minor, v.Name)
			}
			// Every torch variant has an nvidia/cuda image to build on.
			found := false
			for _, tag := range db.Images.Tags {
				if cuda.MajorMinor(tag.CUDA) == v.CUDA {
					found = true
				}
			}
			if !found {
				t.Errorf("torch %s %s: no nvidia/cuda image data for CUDA %s", r.Minor, v.Name, v.CUDA)
			}
		}
	}
}

func TestDataImagesAgree(t *testing.T) {
	db := mustDB()
	for _, tag := range db.Images.Tags {
		if !driverKnows(t, tag.CUDA) {
			t.Errorf("image %s: not in the driver table", tag.CUDA)
		}
		// Every tag has a cuDNN variant; the exact version is known for
		// those read from the Dockerfiles, and agrees with the tag's infix.
		if tag.CuDNNToken == "" {
			t.Errorf("image %s: no cuDNN entry", tag.CUDA)
		}
		if tag.CuDNN == "" && !strings.Contains(tag.Source, "cuDNN version of these tags is not in kiln's data") {
			t.Errorf("image %s: no cuDNN version and the source does not say why", tag.CUDA)
		}
		if tag.CuDNN != "" && tagCuDNNMajor(&ImageTag{CuDNNToken: tag.CuDNNToken}) != tagCuDNNMajor(&tag) {
			t.Errorf("image %s: token %s but cuDNN %s", tag.CUDA, tag.CuDNNToken, tag.CuDNN)
		}
	}
	cdb, err := cuda.Data()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cdb.Drivers.RequireCUDA {
		found := false
		for _, tag := range db.Images.Tags {
			if tag.CUDA == r.Image {
				found = true
			}
		}
		if !found {
			t.Errorf("NVIDIA_REQUIRE_CUDA row %s: every cuda tag with a requirement has a cuDNN entry", r.Image)
		}
		if cuda.MajorMinor(r.Image) != r.CUDAGE || len(r.Brands) == 0 || len(r.Branches) == 0 {
			t.Errorf("NVIDIA_REQUIRE_CUDA row %s: %+v", r.Image, r)
		}
		req, _, ok := cuda.ImageRequireCUDA(r.Image)
		if !ok || req.CUDAMin() != r.CUDAGE {
			t.Errorf("cuda.ImageRequireCUDA(%s) = %v", r.Image, req)
		}
	}
	for _, o := range db.Images.OS {
		for _, v := range []string{o.FirstCUDA, o.LastCUDA} {
			if v != "" && !driverKnows(t, v) {
				t.Errorf("os %s: CUDA %s unknown", o.Name, v)
			}
		}
	}
}

func TestDataFAAndBNBAgree(t *testing.T) {
	db := mustDB()
	for i, r := range db.FA.Releases {
		if i > 0 && pepCompare(db.FA.Releases[i-1].Version, r.Version) >= 0 {
			t.Errorf("FA releases out of order at %s", r.Version)
		}
		for _, c := range r.CUDABuilt {
			if !driverKnows(t, c) {
				t.Errorf("FA %s built with unknown CUDA %s", r.Version, c)
			}
		}
		for _, tv := range r.Torch {
			if cuda.MustVersion(tv).Major() == 2 && cuda.CompareVersions(cuda.MajorMinor(tv), "2.1") >= 0 {
				rel := (&resolver{db: db}).torchRelease(cuda.MajorMinor(tv))
				if rel == nil {
					t.Errorf("FA %s lists torch %s that kiln does not know", r.Version, tv)
				}
			}
		}
	}
	for i, r := range db.BNB.Releases {
		if i > 0 && cuda.CompareVersions(db.BNB.Releases[i-1].latest(), r.Versions[0]) >= 0 {
			t.Errorf("bnb releases out of order at %v", r.Versions)
		}
		for _, c := range r.CUDABuilds {
			if !driverKnows(t, c) {
				t.Errorf("bnb %v: CUDA %s unknown", r.Versions, c)
			}
		}
		if r.SASS["default"] == "" {
			t.Errorf("bnb %v: no default SASS list", r.Versions)
		}
	}
}
