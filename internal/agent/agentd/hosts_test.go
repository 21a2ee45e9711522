package agentd

import "testing"

func TestHostsContent(t *testing.T) {
	for _, tc := range []struct{ name, old, host, want string }{
		{"no file", "", "sb-1", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsb-1\t" + hostsMark + "\n"},
		{"image's lines kept", "127.0.0.1\tlocalhost\n::1 localhost\n10.0.0.1 db\n", "web",
			"127.0.0.1\tlocalhost\n::1 localhost\n10.0.0.1 db\n127.0.1.1\tweb\t" + hostsMark + "\n"},
		{"berth's line replaced, no newline at the end", "127.0.0.1 localhost\n127.0.1.1\told\t" + hostsMark + "\n::1 localhost\n9.9.9.9 x", "new",
			"127.0.0.1 localhost\n::1 localhost\n9.9.9.9 x\n127.0.1.1\tnew\t" + hostsMark + "\n"},
		{"a hostname that cannot stand in a hosts line", "", "bad name\n1.2.3.4 evil",
			"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(hostsContent([]byte(tc.old), tc.host)); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
