"""The template driver passes the conformance battery and serves through a real host."""

from devicehost.testing import FakeRoot, check_driver


def test_conformance_on_simulated_node(fake_root: FakeRoot) -> None:
    """Four simulated widgets enumerate, all healthy, and each allocates alone."""
    report = check_driver("template", fake_root, simulated=True)
    assert report.devices == {"example.com/widget": 4}
    assert report.healthy == {"example.com/widget": 4}


def test_no_widgets_means_no_resource(fake_root: FakeRoot, kubelet, run_host) -> None:
    """On a node without /dev/widget*, the driver serves nothing and nothing registers."""
    host = run_host(enabled_drivers=("template",))
    assert host.host.resources == {}
    assert kubelet.registrations == []


def test_fault_reaches_kubelet_and_recovers(fake_root: FakeRoot, kubelet, run_host) -> None:
    """A widget's health file flipping is streamed both ways through ListAndWatch."""
    host = run_host(enabled_drivers=("template",), simulate=True)
    widgets = host.simulated_root("template")
    kubelet.wait_registered("example.com/widget")
    kubelet.wait_devices("example.com/widget", lambda d: len(d) == 4)
    widgets.write("/sys/class/widget/widget2/health", "fault")
    kubelet.wait_health("example.com/widget", "widget2", "Unhealthy")
    widgets.write("/sys/class/widget/widget2/health", "ok")
    kubelet.wait_health("example.com/widget", "widget2", "Healthy")
