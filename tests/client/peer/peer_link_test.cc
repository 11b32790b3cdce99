// Peer links over real mutual TLS on 127.0.0.1: who is admitted, who is
// refused and why, and that bytes cross intact.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/peer/peer_dial.h"
#include "client/peer/peer_listener.h"
#include "client/peer/peer_socket.h"
#include "client/peer/peer_tls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;
using testing::ListenOnLoopback;
using testing::PeerTestPki;
using ::testing::SizeIs;

const std::vector<std::string> kMembers = {"site-0", "site-1", "site-2"};

v1::PeerLinkHello Hello(int from, int to, uint64_t epoch = 1,
                        const std::string& group = "g") {
  v1::PeerLinkHello hello;
  hello.set_group(group);
  hello.set_epoch(epoch);
  hello.set_from_rank(from);
  hello.set_to_rank(to);
  return hello;
}

// Rank 1 ("site-1") listening, recording what it refuses.
class ListeningMember : public ::testing::Test {
 protected:
  void SetUp() override {
    PeerListenerOptions options;
    options.handshake_timeout = absl::Seconds(2);
    options.on_refusal = [this](const absl::Status& status) {
      absl::MutexLock lock(&mu_);
      refusals_.push_back(status);
    };
    auto listener =
        PeerListener::Start(pki_.Tls("site-1"), ListenOnLoopback(), options);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    listener_->ExpectEpoch("g", 1, 1, kMembers);
    endpoint_ = absl::StrCat("127.0.0.1:", listener_->port());
  }
  // The listener's threads report refusals into this fixture: stop them
  // before the fixture's members go.
  void TearDown() override { listener_.reset(); }
  absl::StatusOr<std::unique_ptr<PeerLink>> Dial(
      const TlsFiles& files, const v1::PeerLinkHello& hello,
      const std::string& expected = "site-1") {
    auto tls = PeerTls::Create(files);
    if (!tls.ok()) return tls.status();
    return DialPeerLink(**tls, endpoint_, hello, expected,
                        absl::Now() + absl::Seconds(10));
  }
  std::vector<absl::Status> Refusals(size_t at_least) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return refusals_.size() >= at_least;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return refusals_;
  }

  PeerTestPki pki_;
  std::unique_ptr<PeerListener> listener_;
  std::string endpoint_;
  absl::Mutex mu_;
  std::vector<absl::Status> refusals_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ListeningMember, AdmitsTheRendezvousMemberAndCarriesBytesIntact) {
  auto dialed = Dial(pki_.Member("site-0"), Hello(0, 1));
  ASSERT_TRUE(dialed.ok()) << dialed.status();
  EXPECT_EQ((*dialed)->peer().identity, "site-1");
  auto taken = listener_->Take("g", 1, 0, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ((*taken)->peer().identity, "site-0");
  std::string sent(3 << 20, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 7);
  std::thread sender([&] {
    EXPECT_TRUE((*dialed)->Send(sent, absl::Now() + absl::Seconds(30)).ok());
  });
  std::string received(sent.size(), '\1');
  ASSERT_TRUE((*taken)
                  ->Receive(received.data(), received.size(),
                            absl::Now() + absl::Seconds(30))
                  .ok());
  sender.join();
  EXPECT_EQ(received, sent);
}

TEST_F(ListeningMember, RefusesAnotherMembersCertificateForARank) {
  // site-2 claims to be rank 0.
  auto dialed = Dial(pki_.Member("site-2"), Hello(0, 1));
  EXPECT_EQ(dialed.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(dialed.status().message(),
              HasSubstr("the certificate names 'site-2', but rank 0 of this "
                        "epoch is 'site-0'"));
  std::vector<absl::Status> refusals = Refusals(1);
  ASSERT_THAT(refusals, SizeIs(1));
  EXPECT_EQ(refusals[0].code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refusals[0].message(), HasSubstr("('site-2')"));
  // Nothing was admitted for rank 0.
  EXPECT_EQ(listener_->Take("g", 1, 0, absl::Now() + absl::Milliseconds(100))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ListeningMember, RefusesANonMembersAndAForeignCasCertificate) {
  auto outsider = Dial(pki_.Member("mallory"), Hello(0, 1));
  EXPECT_EQ(outsider.status().code(), absl::StatusCode::kPermissionDenied);
  auto other_ca = CreateCertificateAuthority("another CA", absl::Hours(1));
  ASSERT_TRUE(other_ca.ok());
  // A certificate for site-0's name from a CA the federation does not
  // trust: the listener's verification refuses it after the handshake.
  auto forged = Dial(pki_.Member("site-0", &*other_ca), Hello(0, 1));
  EXPECT_FALSE(forged.ok());
  std::vector<absl::Status> refusals = Refusals(2);
  ASSERT_THAT(refusals, SizeIs(2));
  EXPECT_EQ(refusals[1].code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refusals[1].message(), HasSubstr("is not issued by"));
}

TEST_F(ListeningMember, TheDialerRefusesAListenerThatIsNotTheExpectedMember) {
  // The rendezvous said rank 1 is site-2, but site-1 listens there.
  auto dialed = Dial(pki_.Member("site-0"), Hello(0, 1), "site-2");
  EXPECT_EQ(dialed.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(dialed.status().message(),
              HasSubstr("the certificate there names 'site-1', not the member "
                        "the rendezvous gave for rank 1"));
}

TEST_F(ListeningMember, RefusesWrongRanksEpochsAndASecondLink) {
  auto wrong_to = Dial(pki_.Member("site-0"), Hello(0, 2));
  EXPECT_EQ(wrong_to.status().code(), absl::StatusCode::kInvalidArgument);
  auto self = Dial(pki_.Member("site-1"), Hello(1, 1));
  EXPECT_EQ(self.status().code(), absl::StatusCode::kInvalidArgument);
  auto past_world = Dial(pki_.Member("site-0"), Hello(7, 1));
  EXPECT_EQ(past_world.status().code(), absl::StatusCode::kInvalidArgument);
  // An epoch this member is not in: refused once the handshake time ends.
  auto other_epoch = Dial(pki_.Member("site-0"), Hello(0, 1, 2));
  EXPECT_EQ(other_epoch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other_epoch.status().message(),
              HasSubstr("no epoch 2 of group 'g'"));
  auto first = Dial(pki_.Member("site-0"), Hello(0, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Dial(pki_.Member("site-0"), Hello(0, 1));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(ListeningMember, AHelloBeforeTheEpochIsExpectedWaitsForIt) {
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(300));
    listener_->ExpectEpoch("g", 5, 1, kMembers);
  });
  auto dialed = Dial(pki_.Member("site-2"), Hello(2, 1, 5));
  later.join();
  ASSERT_TRUE(dialed.ok()) << dialed.status();
  EXPECT_TRUE(listener_->Take("g", 5, 2, absl::Now() + absl::Seconds(10)).ok());
}

TEST_F(ListeningMember, ARevokedCertificateIsRefused) {
  const TlsFiles revoked = pki_.Member("site-0");
  auto crl = IssueCrl(pki_.ca(), {revoked.cert_pem}, absl::Now(),
                      absl::Now() + absl::Hours(1));
  ASSERT_TRUE(crl.ok()) << crl.status();
  auto listener = PeerListener::Start(
      pki_.Tls("site-2", *crl), ListenOnLoopback(), PeerListenerOptions());
  ASSERT_TRUE(listener.ok());
  (*listener)->ExpectEpoch("g", 1, 2, kMembers);
  auto tls = PeerTls::Create(revoked);
  ASSERT_TRUE(tls.ok());
  auto dialed =
      DialPeerLink(**tls, absl::StrCat("127.0.0.1:", (*listener)->port()),
                   Hello(0, 2), "site-2", absl::Now() + absl::Seconds(10));
  EXPECT_FALSE(dialed.ok());
  EXPECT_EQ((*listener)
                ->Take("g", 1, 0, absl::Now() + absl::Milliseconds(200))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ListeningMember, GarbageAndSilentConnectionsAreClosedAndCounted) {
  // A connection that sends no TLS, and one that sends nothing at all.
  auto garbage = ConnectTcp(endpoint_, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(garbage.ok());
  const std::string junk(300, 'x');
  ASSERT_EQ(::write(garbage->fd(), junk.data(), junk.size()),
            static_cast<ssize_t>(junk.size()));
  auto silent = ConnectTcp(endpoint_, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(silent.ok());
  std::vector<absl::Status> refusals = Refusals(2);
  ASSERT_THAT(refusals, SizeIs(2));
  // Then a real member still gets in.
  auto dialed = Dial(pki_.Member("site-0"), Hello(0, 1));
  EXPECT_TRUE(dialed.ok()) << dialed.status();
}

TEST_F(ListeningMember, AbortWakesAReceiverAndTheOtherEndSeesTheClose) {
  auto dialed = Dial(pki_.Member("site-0"), Hello(0, 1));
  ASSERT_TRUE(dialed.ok()) << dialed.status();
  auto taken = listener_->Take("g", 1, 0, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(taken.ok());
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    (*taken)->Abort();
  });
  char byte;
  const absl::Time start = absl::Now();
  absl::Status status =
      (*taken)->Receive(&byte, 1, absl::Now() + absl::Seconds(30));
  aborter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  status = (*dialed)->Receive(&byte, 1, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("the link to rank 1 ('site-1')"));
}

TEST_F(ListeningMember, AStalledLinkMissesItsDeadline) {
  auto dialed = Dial(pki_.Member("site-0"), Hello(0, 1));
  ASSERT_TRUE(dialed.ok());
  auto taken = listener_->Take("g", 1, 0, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(taken.ok());
  char byte;
  absl::Status status =
      (*taken)->Receive(&byte, 1, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(PeerTls, RefusesPlaintextAndAMismatchedKey) {
  PeerTestPki pki;
  TlsFiles plain = pki.Member("site-0");
  plain.insecure_plaintext_for_benchmarks = true;
  EXPECT_EQ(PeerTls::Create(plain).status().code(),
            absl::StatusCode::kInvalidArgument);
  TlsFiles mismatched = pki.Member("site-0");
  mismatched.key_pem = pki.Member("site-1").key_pem;
  EXPECT_EQ(PeerTls::Create(mismatched).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedgather
