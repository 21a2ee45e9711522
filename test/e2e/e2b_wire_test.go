package e2e

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	_ "github.com/berth-sh/berth/internal/e2b/envdpb/filesystem"
	_ "github.com/berth-sh/berth/internal/e2b/envdpb/process"
	"github.com/berth-sh/berth/internal/testenv"
)

// TestE2BWireMatchesSDK compares the door's envd protocol, message by
// message and field by field (name, number, type, cardinality, oneof),
// and method by method, with the descriptors the pinned e2b SDK embeds:
// what the SDK sends is what the door decodes.
func TestE2BWireMatchesSDK(t *testing.T) {
	parallel(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "test", "e2b", "node_modules", "e2b", "dist", "index.mjs"))
	if err != nil {
		t.Fatalf("the pinned e2b SDK is not installed (scripts/install-deps.sh): %v", err)
	}
	ms := regexp.MustCompile(`fileDesc\("([A-Za-z0-9+/=]+)"`).FindAllSubmatch(b, -1)
	if len(ms) != 2 {
		t.Fatalf("found %d embedded descriptors in the SDK, want 2 (process, filesystem)", len(ms))
	}
	for _, m := range ms {
		raw, err := base64.RawStdEncoding.DecodeString(string(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		var sdk descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &sdk); err != nil {
			t.Fatal(err)
		}
		pkg := sdk.GetPackage()
		var check func(prefix string, msgs []*descriptorpb.DescriptorProto)
		check = func(prefix string, msgs []*descriptorpb.DescriptorProto) {
			for _, sm := range msgs {
				name := prefix + "." + sm.GetName()
				d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
				if err != nil {
					t.Errorf("the door has no message %s: %v", name, err)
					continue
				}
				md := d.(protoreflect.MessageDescriptor)
				if md.Fields().Len() != len(sm.Field) {
					t.Errorf("%s: %d fields, the SDK %d", name, md.Fields().Len(), len(sm.Field))
				}
				for _, sf := range sm.Field {
					f := md.Fields().ByNumber(protoreflect.FieldNumber(sf.GetNumber()))
					if f == nil || string(f.Name()) != sf.GetName() || int32(f.Kind()) != int32(sf.GetType()) ||
						(f.Cardinality() == protoreflect.Repeated) != (sf.GetLabel() == descriptorpb.FieldDescriptorProto_LABEL_REPEATED) ||
						f.HasPresence() != (sf.GetProto3Optional() || sf.OneofIndex != nil || sf.GetType() == descriptorpb.FieldDescriptorProto_TYPE_MESSAGE && sf.GetLabel() != descriptorpb.FieldDescriptorProto_LABEL_REPEATED) {
						t.Errorf("%s field %d: the door has %v, the SDK %v", name, sf.GetNumber(), f, sf)
					}
				}
				check(name, sm.NestedType)
			}
		}
		check(pkg, sdk.MessageType)
		for _, se := range sdk.EnumType {
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(pkg + "." + se.GetName()))
			if err != nil {
				t.Errorf("the door has no enum %s.%s", pkg, se.GetName())
				continue
			}
			ed := d.(protoreflect.EnumDescriptor)
			for _, v := range se.Value {
				if ev := ed.Values().ByNumber(protoreflect.EnumNumber(v.GetNumber())); ev == nil || string(ev.Name()) != v.GetName() {
					t.Errorf("enum %s value %d: the door has %v, the SDK %s", se.GetName(), v.GetNumber(), ev, v.GetName())
				}
			}
		}
		for _, ss := range sdk.Service {
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(pkg + "." + ss.GetName()))
			if err != nil {
				t.Errorf("the door has no service %s.%s", pkg, ss.GetName())
				continue
			}
			sd := d.(protoreflect.ServiceDescriptor)
			if sd.Methods().Len() != len(ss.Method) {
				t.Errorf("service %s: %d methods, the SDK %d", ss.GetName(), sd.Methods().Len(), len(ss.Method))
			}
			for _, sm := range ss.Method {
				md := sd.Methods().ByName(protoreflect.Name(sm.GetName()))
				if md == nil || "."+string(md.Input().FullName()) != sm.GetInputType() || "."+string(md.Output().FullName()) != sm.GetOutputType() ||
					md.IsStreamingClient() != sm.GetClientStreaming() || md.IsStreamingServer() != sm.GetServerStreaming() {
					t.Errorf("method %s.%s: the door has %v, the SDK %v", ss.GetName(), sm.GetName(), md, sm)
				}
			}
		}
	}
}
