//! Vantages in network namespaces: each reaches the lab's service address from an address of its
//! own (what a lab server sees), a cut link cuts off that vantage alone until it is restored, a
//! process started in a vantage is in its namespace, and the namespaces are gone once dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use x402_lab::vantage_net::VantageNet;

/// A server on the service address that writes back the peer address it sees, until `stop`.
fn echo_peer(net: &VantageNet) -> SocketAddr {
    let listener = TcpListener::bind((net.service_address(), 0)).expect("bind the service address");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let peer = stream
                .peer_addr()
                .map(|p| p.ip().to_string())
                .unwrap_or_default();
            let _ = stream.write_all(peer.as_bytes());
        }
    });
    addr
}

/// What vantage `i` reads from the server: the address it was seen from, or the error.
fn seen_from(net: &VantageNet, i: usize, server: SocketAddr) -> Result<String, String> {
    net.run_in(i, move || {
        let mut stream = TcpStream::connect_timeout(&server, Duration::from_millis(700))
            .map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let mut seen = String::new();
        stream
            .read_to_string(&mut seen)
            .map_err(|e| e.to_string())?;
        Ok(seen)
    })
    .expect("enter the vantage's namespace")
}

#[test]
fn vantages_are_seen_from_their_own_addresses_and_a_cut_link_cuts_off_one() {
    let net = VantageNet::create(3).expect("three vantages (needs root and iproute2)");
    let server = echo_peer(&net);
    let addresses: Vec<String> = net
        .vantages()
        .iter()
        .map(|v| v.address.to_string())
        .collect();
    for (i, address) in addresses.iter().enumerate() {
        assert_eq!(
            seen_from(&net, i, server).as_ref(),
            Ok(address),
            "vantage {i}"
        );
    }
    assert_eq!(
        addresses
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3,
        "three distinct addresses"
    );
    // The loopback of a vantage is its own: nothing of this namespace listens there.
    let loopback = SocketAddr::from(([127, 0, 0, 1], server.port()));
    assert!(seen_from(&net, 0, loopback).is_err());

    net.cut(1).unwrap();
    assert!(seen_from(&net, 1, server).is_err(), "vantage 1 is cut off");
    assert_eq!(seen_from(&net, 0, server).as_ref(), Ok(&addresses[0]));
    assert_eq!(seen_from(&net, 2, server).as_ref(), Ok(&addresses[2]));
    net.restore(1).unwrap();
    let mut back = seen_from(&net, 1, server);
    for _ in 0..20 {
        if back.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        back = seen_from(&net, 1, server);
    }
    assert_eq!(back.as_ref(), Ok(&addresses[1]), "vantage 1 is back");

    // A child process runs in the vantage's namespace: it sees the vantage's address as its own.
    let out = net
        .command(2, "ip")
        .unwrap()
        .args(["-o", "-4", "addr", "show"])
        .output()
        .expect("run ip in vantage 2");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(&format!("{}/30", addresses[2])), "{shown}");
    assert!(
        !shown.contains(&format!("{}/32", net.service_address())),
        "{shown}"
    );

    let namespaces: Vec<String> = net.vantages().iter().map(|v| v.namespace.clone()).collect();
    drop(net);
    for name in namespaces {
        assert!(
            !std::path::Path::new(&format!("/run/netns/{name}")).exists(),
            "{name} deleted"
        );
    }
}

/// A throwaway PostgreSQL reachable from the vantages: each connects at the service address and
/// the server sees it at its own address; a cut vantage cannot connect, the others still do.
#[test]
fn postgres_is_reached_by_each_vantage_from_its_own_address() {
    use x402_lab::postgres::{Postgres, url_at};
    let net = VantageNet::create(2).expect("two vantages (needs root and iproute2)");
    let service = net.service_address();
    let pg = Postgres::throwaway_reachable(&net.postgres_reach())
        .expect("a throwaway PostgreSQL (needs the postgresql package)");
    let url = url_at(&pg.fresh_database("vantage_net").unwrap(), service);
    let client_address = |i: usize| -> Result<String, String> {
        let url = url.clone();
        net.run_in(i, move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async move {
                let connect = tokio_postgres::connect(&url, tokio_postgres::NoTls);
                let (client, connection) = tokio::time::timeout(Duration::from_secs(2), connect)
                    .await
                    .map_err(|_| "timed out".to_string())?
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                let row = client
                    .query_one("SELECT host(inet_client_addr())", &[])
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(row.get::<_, String>(0))
            })
        })
        .expect("enter the vantage's namespace")
    };
    for (i, vantage) in net.vantages().iter().enumerate() {
        assert_eq!(
            client_address(i),
            Ok(vantage.address.to_string()),
            "vantage {i}"
        );
    }
    net.cut(0).unwrap();
    assert!(client_address(0).is_err(), "vantage 0 is cut off");
    assert_eq!(client_address(1), Ok(net.vantages()[1].address.to_string()));
}

/// What vantage `i` is told by `url`: the payTo of the 402's first `accepts`, or the error.
fn pay_to_seen(net: &VantageNet, i: usize, url: &str, ca_pem: &str) -> Result<String, String> {
    let (url, ca_pem) = (url.to_string(), ca_pem.to_string());
    net.run_in(i, move || {
        // A runtime of this thread's own: the client's sockets are made here, in the namespace.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async move {
            x402_lab::install_crypto_provider();
            let client = reqwest::Client::builder()
                .add_root_certificate(
                    reqwest::Certificate::from_pem(ca_pem.as_bytes()).map_err(|e| e.to_string())?,
                )
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()
                .map_err(|e| e.to_string())?;
            let resp = client
                .get(format!("{url}?city=Paris"))
                .send()
                .await
                .map_err(|e| format!("{e:?}"))?;
            let (pr, _) = crate::common::quote(resp).await;
            Ok(pr["accepts"][0]["payTo"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase())
        })
    })
    .expect("enter the vantage's namespace")
}

/// Lab endpoints that answer by source address: a cloaked one quotes another payee to one vantage
/// only (the others see the lab's payee at the same time), and a regional outage resets one
/// vantage's connections while the others are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_answer_each_vantage_by_its_source_address() {
    use x402_lab::server::{BySource, Placement};
    let mut lab = crate::common::lab(&["honest-v2"]).await;
    let net = VantageNet::create(3).expect("three vantages (needs root and iproute2)");
    let address = |i: usize| std::net::IpAddr::V4(net.vantages()[i].address);
    let other = lab.other_wallet;
    let cloaked = lab
        .spawn_placed(
            "honest-v2",
            "cloaked",
            &Placement {
                bind: net.service_address().into(),
                by_source: BySource::Cloak {
                    from: vec![address(0)],
                    pay_to: other,
                },
            },
        )
        .await
        .unwrap();
    let regional = lab
        .spawn_placed(
            "honest-v2",
            "regional",
            &Placement {
                bind: net.service_address().into(),
                by_source: BySource::Unreachable(vec![address(1)]),
            },
        )
        .await
        .unwrap();
    assert!(cloaked.starts_with(&format!("https://{}:", net.service_address())));
    let ours = format!("{:#x}", lab.pay_to);
    let theirs = format!("{other:#x}");
    assert_ne!(ours, theirs);
    let net = std::sync::Arc::new(net);
    let ca = lab.ca_pem.clone();
    let seen = {
        let (net, ca) = (net.clone(), ca.clone());
        tokio::task::spawn_blocking(move || {
            (0..3)
                .map(|i| {
                    (
                        pay_to_seen(&net, i, &cloaked, &ca),
                        pay_to_seen(&net, i, &regional, &ca),
                    )
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap()
    };
    assert_eq!(seen[0].0, Ok(theirs.clone()), "vantage 0 is cloaked");
    assert_eq!(seen[1].0, Ok(ours.clone()), "vantage 1 sees the payee");
    assert_eq!(seen[2].0, Ok(ours.clone()), "vantage 2 sees the payee");
    assert_eq!(seen[0].1, Ok(ours.clone()), "the outage spares vantage 0");
    let refused = seen[1].1.as_ref().expect_err("vantage 1 is in the outage");
    assert!(
        refused.to_lowercase().contains("reset") || refused.contains("Connect"),
        "{refused}"
    );
    assert_eq!(seen[2].1, Ok(ours), "the outage spares vantage 2");
}
