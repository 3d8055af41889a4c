//! The certificates and keys a test control plane is made with, fresh at
//! every start: a CA, the API server's serving certificate, the client
//! certificate of a `system:masters` administrator (which the controllers,
//! the scheduler and `kubectl` also use, and the API server presents to
//! kubelets), the client certificate of a real node's kubelet, and the key
//! service-account tokens are signed with.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// The user a real node's kubelet is (testkit's [`Cluster`](super::Cluster)).
pub(crate) const NODE_USER: &str = "system:node:sless-node";

/// Where [`Pki::write`] put each file, and the PEM a client needs.
pub(crate) struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    /// The kubelet's client certificate: the node [`NODE_USER`] of group
    /// `system:nodes`, which the Node authorizer and NodeRestriction judge.
    pub node_cert_pem: String,
    pub node_key_pem: String,
    pub service_accounts_key: PathBuf,
    pub service_accounts_public: PathBuf,
    pub ca_pem: String,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
}

fn name(common: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

fn leaf(
    names: &[&str],
    dn: DistinguishedName,
    purpose: ExtendedKeyUsagePurpose,
) -> CertificateParams {
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("certificate names");
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![purpose];
    params
}

impl Pki {
    /// Makes everything and writes it into `dir`.
    pub fn write(dir: &Path) -> Pki {
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.distinguished_name = name("sless-test-kubernetes-ca", None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("the CA certificate");

        let server_key = KeyPair::generate().expect("a server key");
        let server = leaf(
            &[
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "10.0.0.1",
            ],
            name("kube-apiserver", None),
            ExtendedKeyUsagePurpose::ServerAuth,
        )
        .signed_by(&server_key, &ca)
        .expect("the server certificate");

        let admin_key = KeyPair::generate().expect("an admin key");
        let admin = leaf(
            &[],
            name("sless-test-admin", Some("system:masters")),
            ExtendedKeyUsagePurpose::ClientAuth,
        )
        .signed_by(&admin_key, &ca)
        .expect("the admin certificate");

        let node_key = KeyPair::generate().expect("a node key");
        let node = leaf(
            &[],
            name(NODE_USER, Some("system:nodes")),
            ExtendedKeyUsagePurpose::ClientAuth,
        )
        .signed_by(&node_key, &ca)
        .expect("the node certificate");

        let sa_key = KeyPair::generate().expect("a service-account key");

        let file = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).expect("writing a certificate");
            path
        };
        Pki {
            ca: file("ca.crt", &ca.pem()),
            server_cert: file("apiserver.crt", &server.pem()),
            server_key: file("apiserver.key", &server_key.serialize_pem()),
            admin_cert: file("admin.crt", &admin.pem()),
            admin_key: file("admin.key", &admin_key.serialize_pem()),
            node_cert_pem: node.pem(),
            node_key_pem: node_key.serialize_pem(),
            service_accounts_key: file("service-accounts.key", &sa_key.serialize_pem()),
            service_accounts_public: file("service-accounts.pub", &sa_key.public_key_pem()),
            ca_pem: ca.pem(),
            admin_cert_pem: admin.pem(),
            admin_key_pem: admin_key.serialize_pem(),
        }
    }
}
